-- One-shot persona invocation (SPEC §9.8) and the escalation path (SPEC §12).
--
-- An ask has no email behind it, and synedre.launches.message_id is NOT NULL (a launch is
-- a message's claim, fenced by its attempt): asks get a journal of their own, shaped like
-- launches (row + ordered events), and count against the same daily spending cap.

INSERT INTO synedre.ai_routing (feature, provider, model, fallbacks, timeout_s, json_output)
VALUES ('agent_ask', 'mistral', 'mistral-small-latest',
        '[{"provider": "openai", "model": "gpt-4o-mini"}]', 60, false)
ON CONFLICT (feature) DO NOTHING;

CREATE TABLE synedre.agent_asks (
  id bigserial PRIMARY KEY,
  agent_codename text NOT NULL,
  question text NOT NULL,
  via text NOT NULL CHECK (via IN ('facade', 'claude')),
  persona_level text NOT NULL,
  status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'succeeded', 'failed', 'refused')),
  answer text,
  provider text,
  model text,
  input_tokens integer,
  output_tokens integer,
  cost_usd numeric(12,6),
  error text,
  started_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz
);
CREATE INDEX agent_asks_started ON synedre.agent_asks (started_at);

CREATE TABLE synedre.agent_ask_events (
  ask_id bigint NOT NULL REFERENCES synedre.agent_asks ON DELETE CASCADE,
  seq integer NOT NULL,
  event_type text NOT NULL,
  payload jsonb NOT NULL DEFAULT '{}',
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (ask_id, seq)
);

-- Prices are data: USD per million tokens. A model missing here is costed at the
-- conservative default of synedre/agents.py, never at zero.
CREATE TABLE synedre.ai_prices (
  provider text NOT NULL,
  model text NOT NULL,
  usd_per_mtok_in numeric(10,4) NOT NULL CHECK (usd_per_mtok_in >= 0),
  usd_per_mtok_out numeric(10,4) NOT NULL CHECK (usd_per_mtok_out >= 0),
  PRIMARY KEY (provider, model)
);
INSERT INTO synedre.ai_prices VALUES
  ('mistral', 'mistral-small-latest', 0.1, 0.3),
  ('openai', 'gpt-4o-mini', 0.15, 0.6),
  ('anthropic', 'claude-sonnet-5-5', 3, 15),
  ('local', 'hash-1024', 0, 0)
ON CONFLICT DO NOTHING;

-- Everything paid today (UTC), launches and asks together: the daily cap reads this.
CREATE VIEW synedre.spend_today AS
  SELECT (SELECT coalesce(sum(cost_usd), 0) FROM synedre.launches
           WHERE started_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
       + (SELECT coalesce(sum(cost_usd), 0) FROM synedre.agent_asks
           WHERE started_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS usd;

-- Incidents (SPEC §12): one mail per kind per hour, decided by this key, not by code.
CREATE TABLE synedre.incidents (
  id bigserial PRIMARY KEY,
  kind text NOT NULL,
  hour timestamptz NOT NULL,
  subject text NOT NULL,
  detail jsonb NOT NULL DEFAULT '{}',
  status text NOT NULL DEFAULT 'raising' CHECK (status IN ('raising', 'mailed', 'failed')),
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (kind, hour)
);
