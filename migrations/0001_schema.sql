-- The data model of SPEC §2, in the dedicated schema `synedre`.
CREATE EXTENSION IF NOT EXISTS vector;

-- Agents roster and satellites --------------------------------------------------
CREATE TABLE synedre.agents (
  id bigserial PRIMARY KEY,
  codename text NOT NULL UNIQUE CHECK (codename ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
  nickname text NOT NULL,
  role text NOT NULL,
  group_name text NOT NULL CHECK (group_name IN ('direction','cadrage','execution','validation')),
  orbite smallint NOT NULL CHECK (orbite BETWEEN 0 AND 3),
  heritage text, cognitive_frame text, personality text, quote text, inspiration text, proof text,
  job_mission text, job_perimeter text, job_key_checks text, content_md text,
  role_en text, heritage_en text, cognitive_frame_en text, personality_en text, quote_en text,
  inspiration_en text, proof_en text, job_mission_en text, job_perimeter_en text, job_key_checks_en text,
  active boolean NOT NULL DEFAULT true,
  prompt_domains text[] NOT NULL DEFAULT '{}'
    CHECK (prompt_domains <@ ARRAY['content','faq','cover','podcast','linkedin','reels']),
  auto_spawn boolean NOT NULL DEFAULT false,
  spawn_count integer NOT NULL DEFAULT 0,
  error_count integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
-- Orbit 0 is Atlas's alone.
CREATE UNIQUE INDEX agents_orbit_zero_alone ON synedre.agents ((orbite)) WHERE orbite = 0;

CREATE TABLE synedre.agent_activity (
  id bigserial PRIMARY KEY,
  agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  kind text NOT NULL, detail jsonb NOT NULL DEFAULT '{}', at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE synedre.agent_events (
  id bigserial PRIMARY KEY,
  agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  event text NOT NULL, detail jsonb NOT NULL DEFAULT '{}', at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE synedre.agent_heartbeat (
  agent_id bigint PRIMARY KEY REFERENCES synedre.agents ON DELETE CASCADE,
  status text NOT NULL, beat_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE synedre.agent_relations (
  agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  other_agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  relation text NOT NULL,
  PRIMARY KEY (agent_id, other_agent_id, relation)
);
CREATE TABLE synedre.agent_skills (
  agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  skill text NOT NULL, level smallint NOT NULL DEFAULT 1,
  PRIMARY KEY (agent_id, skill)
);
CREATE TABLE synedre.agent_tools (
  agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  tool text NOT NULL,
  PRIMARY KEY (agent_id, tool)
);
CREATE TABLE synedre.agent_xp (
  agent_id bigint PRIMARY KEY REFERENCES synedre.agents ON DELETE CASCADE,
  xp integer NOT NULL DEFAULT 0, level integer NOT NULL DEFAULT 1
);
CREATE TABLE synedre.agent_xp_history (
  id bigserial PRIMARY KEY,
  agent_id bigint NOT NULL REFERENCES synedre.agents ON DELETE CASCADE,
  delta integer NOT NULL, reason text NOT NULL, at timestamptz NOT NULL DEFAULT now()
);

-- Directory: founder, clients, people, chantiers -----------------------------------
CREATE TABLE synedre.founder (
  id smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
  name text NOT NULL,
  emails text[] NOT NULL,
  domain text NOT NULL,
  atlas_address text NOT NULL
);
CREATE TABLE synedre.founder_preferences (
  id bigserial PRIMARY KEY,
  slice text NOT NULL DEFAULT 'core',
  key text NOT NULL,
  value text NOT NULL,
  UNIQUE (slice, key)
);
CREATE TABLE synedre.clients (
  id bigserial PRIMARY KEY,
  codename text NOT NULL UNIQUE,
  name text NOT NULL,
  priority text NOT NULL DEFAULT 'normal',
  mrr numeric(12,2) NOT NULL DEFAULT 0 CHECK (mrr >= 0),
  status text NOT NULL DEFAULT 'active',
  deploy_target text,
  domains text[] NOT NULL DEFAULT '{}'
);
CREATE TABLE synedre.client_persons (
  id bigserial PRIMARY KEY,
  client_id bigint NOT NULL REFERENCES synedre.clients ON DELETE CASCADE,
  name text,
  email text NOT NULL UNIQUE CHECK (email = lower(email))
);
CREATE TABLE synedre.tenant_topology (
  client_id bigint PRIMARY KEY REFERENCES synedre.clients ON DELETE CASCADE,
  deploy_target text NOT NULL,
  config jsonb NOT NULL DEFAULT '{}'  -- ai_provider / ai_model / glm_allowed
);
CREATE TABLE synedre.chantiers (
  id bigserial PRIMARY KEY,
  codename text NOT NULL UNIQUE,
  client_id bigint REFERENCES synedre.clients,
  title text NOT NULL,
  status text NOT NULL DEFAULT 'open' CHECK (status IN ('open','paused','closed')),
  mission_letter text,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE synedre.doctrines (
  id bigserial PRIMARY KEY,
  chantier_id bigint REFERENCES synedre.chantiers ON DELETE CASCADE,  -- null = global
  title text NOT NULL,
  body text NOT NULL,
  veto_glm boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Messages: raw bytes, state, audit ---------------------------------------------------
CREATE TABLE synedre.raw_messages (
  id bigserial PRIMARY KEY,
  mailbox text NOT NULL,
  uidvalidity bigint NOT NULL,
  uid bigint NOT NULL,
  message_id text NOT NULL,
  message_id_synthetic boolean NOT NULL DEFAULT false,
  envelope_from text,
  subject text,
  headers jsonb NOT NULL DEFAULT '[]',
  raw bytea NOT NULL,
  size integer NOT NULL,
  dkim_pass boolean NOT NULL DEFAULT false,
  received_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (mailbox, message_id),
  UNIQUE (mailbox, uidvalidity, uid)
);

CREATE TABLE synedre.runs (
  id bigserial PRIMARY KEY,
  ref_type text NOT NULL,
  ref_id text NOT NULL,
  client_id bigint REFERENCES synedre.clients,
  chantier_id bigint REFERENCES synedre.chantiers,
  title text NOT NULL,
  complexity text NOT NULL CHECK (complexity IN ('leger','plan')),
  status text NOT NULL DEFAULT 'open',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (ref_type, ref_id)
);
CREATE TABLE synedre.questions (
  id bigserial PRIMARY KEY,
  ref_type text NOT NULL,
  ref_id text NOT NULL,
  client_id bigint REFERENCES synedre.clients,
  chantier_id bigint REFERENCES synedre.chantiers,
  title text NOT NULL,
  status text NOT NULL DEFAULT 'open',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (ref_type, ref_id)
);
CREATE TABLE synedre.negotiations (
  id bigserial PRIMARY KEY,
  raw_message_id bigint NOT NULL UNIQUE REFERENCES synedre.raw_messages,
  client_id bigint REFERENCES synedre.clients,
  title text NOT NULL,
  status text NOT NULL DEFAULT 'open',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE synedre.advices (
  id bigserial PRIMARY KEY,
  raw_message_id bigint NOT NULL UNIQUE REFERENCES synedre.raw_messages,
  client_id bigint REFERENCES synedre.clients,
  title text NOT NULL,
  status text NOT NULL DEFAULT 'open',
  created_at timestamptz NOT NULL DEFAULT now()
);

-- One per message; its primary key is the message's internal id, so every stage
-- addresses a message by one number.
CREATE TABLE synedre.email_states (
  message_id bigint PRIMARY KEY REFERENCES synedre.raw_messages,
  status text NOT NULL CHECK (status IN (
    'received','parse_failed','scanned','classified','spawning','spawned','deploying','qa',
    'actioned','noise','blocked_unsafe_attachment','classify_failed','spawn_failed',
    'orchestration_failed','escalated')),
  intent text CHECK (intent IN ('run','question','noise','negociation','conseil')),
  complexity text CHECK (complexity IN ('leger','plan')),
  confidence real CHECK (confidence BETWEEN 0 AND 1),
  model text,
  rationale text,
  client_id bigint REFERENCES synedre.clients,
  client_source text CHECK (client_source IN ('envelope','forwarded-body','unknown')),
  run_id bigint REFERENCES synedre.runs,
  question_id bigint REFERENCES synedre.questions,
  negotiation_id bigint REFERENCES synedre.negotiations,
  advice_id bigint REFERENCES synedre.advices,
  chantier_id bigint REFERENCES synedre.chantiers,
  attachments_dir text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  status_at timestamptz NOT NULL DEFAULT now(),
  -- mutually exclusive materializations (SPEC §7)
  CHECK (num_nonnulls(run_id, question_id, negotiation_id, advice_id) <= 1)
);
CREATE INDEX email_states_status ON synedre.email_states (status, status_at);

CREATE TABLE synedre.attachments (
  id bigserial PRIMARY KEY,
  message_id bigint NOT NULL REFERENCES synedre.raw_messages,
  idx integer NOT NULL,
  filename text,
  content_type text NOT NULL,
  size integer NOT NULL,
  sha256 text NOT NULL,
  stored_name text NOT NULL,
  verdict text CHECK (verdict IN ('clean','infected','error')),
  signature text,
  scanned_at timestamptz,
  UNIQUE (message_id, idx)
);

CREATE TABLE synedre.audit_log (
  id bigserial PRIMARY KEY,
  message_id bigint REFERENCES synedre.raw_messages,
  event text NOT NULL,
  detail jsonb NOT NULL DEFAULT '{}',
  at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_message ON synedre.audit_log (message_id, id);
CREATE INDEX audit_log_event ON synedre.audit_log (event, at);

CREATE TABLE synedre.reply_drafts (
  id bigserial PRIMARY KEY,
  message_id bigint NOT NULL REFERENCES synedre.raw_messages,
  question_id bigint REFERENCES synedre.questions,
  body text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Launches of the coding agent ---------------------------------------------------------
CREATE TABLE synedre.launches (
  id bigserial PRIMARY KEY,
  message_id bigint NOT NULL REFERENCES synedre.raw_messages,
  attempt integer NOT NULL,
  iteration integer NOT NULL DEFAULT 0,
  status text NOT NULL DEFAULT 'running',
  agent_codename text,
  model text,
  model_route jsonb,
  system_prompt text,
  max_turns integer,
  session_id text,
  worktree text,
  branch text,
  exit_code integer,
  stop_reason text,
  is_error boolean,
  num_turns integer,
  cost_usd numeric(12,4),
  contract jsonb,
  salvage jsonb,
  started_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz,
  UNIQUE (message_id, attempt)
);
CREATE TABLE synedre.launch_events (
  launch_id bigint NOT NULL REFERENCES synedre.launches ON DELETE CASCADE,
  seq integer NOT NULL,
  event_type text NOT NULL,
  subtype text,
  tool_name text,
  payload jsonb NOT NULL,
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (launch_id, seq)
);

-- Memory: lessons ("scars") with embeddings --------------------------------------------
CREATE TABLE synedre.lessons (
  id bigserial PRIMARY KEY,
  owner_agent_id bigint REFERENCES synedre.agents ON DELETE CASCADE,  -- null = global
  title text NOT NULL,
  body text NOT NULL,
  embedding vector(1024),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX lessons_embedding ON synedre.lessons USING hnsw (embedding vector_cosine_ops);

-- AI routing: one row per feature -------------------------------------------------------
CREATE TABLE synedre.ai_routing (
  feature text PRIMARY KEY,
  provider text NOT NULL,
  model text NOT NULL,
  fallbacks jsonb NOT NULL DEFAULT '[]',  -- [{"provider": ..., "model": ...}, ...] in order
  timeout_s real NOT NULL DEFAULT 30 CHECK (timeout_s > 0),
  json_output boolean NOT NULL DEFAULT false
);

-- The application role: owns nothing, may read and write data, never DDL.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'synedre_app') THEN
    CREATE ROLE synedre_app NOLOGIN;
  END IF;
END $$;
GRANT USAGE ON SCHEMA synedre TO synedre_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA synedre TO synedre_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA synedre TO synedre_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA synedre GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO synedre_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA synedre GRANT USAGE, SELECT ON SEQUENCES TO synedre_app;
