-- The agent learns from the founder (issue 28, SPEC §9.8): his NON on a recap, a refusal's note
-- and an escalation each become a lesson, scoped to the client (and the agent that ran), with
-- where it came from; the next launch for that client is given them and records which.

-- A lesson now belongs to a client (NULL: every client), may be retired (never given again),
-- and counts how often it was said (the same thing said twice is one lesson) and given.
ALTER TABLE synedre.lessons
  ADD COLUMN client_id bigint REFERENCES synedre.clients ON DELETE CASCADE,
  ADD COLUMN times_said integer NOT NULL DEFAULT 1,
  ADD COLUMN times_given integer NOT NULL DEFAULT 0,
  ADD COLUMN last_given_at timestamptz,
  ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN retired_at timestamptz;

-- What was said, as it was said (redacted): written in the transaction of the decision that
-- said it (so nothing is lost), learnt afterwards with no transaction open (a summary, an
-- embedding: network calls), then linked to the lesson it became or updated. `key` makes the
-- noting idempotent: the same reply or escalation processed twice is one source.
CREATE TABLE synedre.lesson_sources (
  id bigserial PRIMARY KEY,
  key text UNIQUE,  -- e.g. 'recap_rejected:42'; NULL for an operator's `synedre lessons add`
  kind text NOT NULL CHECK (kind IN ('recap_rejected', 'approval_refused', 'escalation', 'operator')),
  message_id bigint REFERENCES synedre.raw_messages ON DELETE SET NULL,
  client_id bigint REFERENCES synedre.clients ON DELETE CASCADE,
  agent_id bigint REFERENCES synedre.agents ON DELETE SET NULL,
  text text NOT NULL,
  lesson_id bigint REFERENCES synedre.lessons ON DELETE SET NULL,
  tries integer NOT NULL DEFAULT 0,
  offered_at timestamptz,  -- last re-offered by the sweep (its first task lost, or it failed)
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  learnt_at timestamptz
);
CREATE INDEX lesson_sources_pending ON synedre.lesson_sources (created_at) WHERE learnt_at IS NULL;
CREATE INDEX lesson_sources_lesson ON synedre.lesson_sources (lesson_id);

-- Which lessons a launch was given (`synedre inspect`, the recap).
ALTER TABLE synedre.launches ADD COLUMN lesson_ids bigint[] NOT NULL DEFAULT '{}';

-- An escalation's lesson: the last failure with its figures, in one or two sentences; routed as
-- the draft reply is (without a key the figures are the lesson).
INSERT INTO synedre.ai_routing (feature, provider, model, fallbacks, timeout_s, json_output) VALUES
  ('lessons_summary', 'mistral', 'mistral-small-latest',
   '[{"provider": "openai", "model": "gpt-4o-mini"}]', 30, false)
ON CONFLICT (feature) DO NOTHING;
