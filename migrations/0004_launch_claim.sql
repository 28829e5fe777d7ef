-- Launch bookkeeping: the claim's attempt number (a fencing token) and model routes as data.
ALTER TABLE synedre.email_states ADD COLUMN launch_attempt integer NOT NULL DEFAULT 0;
ALTER TABLE synedre.launches ADD COLUMN ndjson_path text;
CREATE INDEX launches_running ON synedre.launches (status) WHERE status = 'running';

-- SPEC §8 model routing: per-client GLM authorisation > chantier doctrine (may veto GLM
-- on the email path) > the recommended model; the default row has neither.
CREATE TABLE synedre.model_routes (
  id bigserial PRIMARY KEY,
  client_id bigint REFERENCES synedre.clients ON DELETE CASCADE,
  chantier_id bigint REFERENCES synedre.chantiers ON DELETE CASCADE,
  model text NOT NULL,
  via_proxy text,              -- e.g. a GLM terminal proxy URL; used only after a health check
  glm boolean NOT NULL DEFAULT false,
  note text,
  CHECK (num_nonnulls(client_id, chantier_id) <= 1)
);
CREATE UNIQUE INDEX model_routes_default ON synedre.model_routes ((true)) WHERE client_id IS NULL AND chantier_id IS NULL;
INSERT INTO synedre.model_routes (model, note) VALUES ('sonnet', 'default recommended model');
