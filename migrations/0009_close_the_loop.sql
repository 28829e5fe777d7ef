-- After the launch (SPEC §9): deploy results, one QA check per route and iteration,
-- mock-ups per chantier route, the draft reply routing.

-- One deploy + QA pass per launch of a message: what was deployed, and how it went.
CREATE TABLE synedre.qa_runs (
  id bigserial PRIMARY KEY,
  message_id bigint NOT NULL REFERENCES synedre.raw_messages ON DELETE CASCADE,
  launch_id bigint NOT NULL REFERENCES synedre.launches ON DELETE CASCADE UNIQUE,
  iteration integer NOT NULL,          -- 1 = the first launch, 2 = its first iteration...
  target text,
  base_url text,
  deploy_ok boolean,
  deploy_exit_code integer,
  deploy_log text,                     -- redacted tail
  verdict text CHECK (verdict IN ('passed', 'failed')),
  only_iso_mismatch boolean,
  created_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz
);

-- One route of one QA run: claimed by one QA worker, the last to finish sets the verdict.
CREATE TABLE synedre.qa_checks (
  id bigserial PRIMARY KEY,
  qa_run_id bigint NOT NULL REFERENCES synedre.qa_runs ON DELETE CASCADE,
  declared text NOT NULL,
  resolved text,                       -- the sitemap's path, or null (route_not_in_sitemap)
  resolution text NOT NULL,            -- exact | normalized | closest | route_not_in_sitemap
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'passed', 'failed')),
  claimed_at timestamptz,
  http_status integer,
  reasons jsonb NOT NULL DEFAULT '[]',
  detail jsonb NOT NULL DEFAULT '{}',  -- console / page errors, failed requests, iso figures
  screenshot text,                     -- path in the message's private directory
  diff_image text,
  UNIQUE (qa_run_id, declared)
);
CREATE INDEX qa_checks_pending ON synedre.qa_checks (qa_run_id) WHERE status IN ('pending', 'running');

-- A mock-up image per route of a chantier (`synedre directory mockup`).
CREATE TABLE synedre.mockups (
  chantier_id bigint NOT NULL REFERENCES synedre.chantiers ON DELETE CASCADE,
  route text NOT NULL,
  path text NOT NULL,
  PRIMARY KEY (chantier_id, route)
);

-- The reply draft's origin (launches.iteration exists since 0001: 1 = the first launch).
ALTER TABLE synedre.reply_drafts ADD COLUMN source text NOT NULL DEFAULT 'contract'
  CHECK (source IN ('contract', 'generated'));
ALTER TABLE synedre.reply_drafts ADD CONSTRAINT reply_drafts_one_per_message UNIQUE (message_id);

INSERT INTO synedre.ai_routing (feature, provider, model, fallbacks, timeout_s, json_output)
VALUES ('atlas_draft_reply', 'mistral', 'mistral-small-latest',
        '[{"provider": "openai", "model": "gpt-4o-mini"}]', 30, false)
ON CONFLICT (feature) DO NOTHING;

-- The statuses after the launch (synedre/pipeline.py).
ALTER TABLE synedre.email_states DROP CONSTRAINT email_states_status_check;
ALTER TABLE synedre.email_states ADD CONSTRAINT email_states_status_check CHECK (status IN (
  'received','parse_failed','scanning','scanned','blocked_unsafe_attachment','reading','read',
  'classifying','classified','classify_failed','materializing','materialized','noise',
  'spawning','spawned','spawn_failed','deploying','deployed','qa_planning','qa','qa_passed','qa_failed',
  'report_due','reporting','actioned','orchestration_failed','escalated'));
