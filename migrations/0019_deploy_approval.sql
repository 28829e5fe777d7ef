-- What the agent wrote never runs as the fleet (issue 25, SPEC §13): a change to how a site is
-- deployed (its ./deploy, the tenant's infra_paths) waits for the founder's OK before the deploy.
-- A message may now have two requests: its first launch's (gate 'launch') and, per launch whose
-- deploy changed that, the deploy's (gate 'deploy', launch_id set); never two waiting at once.
ALTER TABLE synedre.approvals DROP CONSTRAINT approvals_message_id_key;
ALTER TABLE synedre.approvals ADD COLUMN gate text NOT NULL DEFAULT 'launch' CHECK (gate IN ('launch', 'deploy'));
ALTER TABLE synedre.approvals ADD COLUMN launch_id bigint REFERENCES synedre.launches ON DELETE CASCADE;
ALTER TABLE synedre.approvals ADD CONSTRAINT approvals_deploy_has_its_launch CHECK ((gate = 'deploy') = (launch_id IS NOT NULL));
CREATE UNIQUE INDEX approvals_one_per_gate ON synedre.approvals (message_id, gate, coalesce(launch_id, 0));
CREATE UNIQUE INDEX approvals_one_waiting ON synedre.approvals (message_id) WHERE status = 'waiting';

-- Per repository, the commit whose deploy script and infrastructure were last deployed (the
-- founder's OK given, or unchanged): what the next deploy's are compared with.
CREATE TABLE synedre.deploy_baselines (
  repo text PRIMARY KEY,              -- the tenant's repository as the directory names it ('' = the fleet's default)
  sha text NOT NULL CHECK (sha ~ '^[0-9a-f]{40,64}$'),
  message_id bigint REFERENCES synedre.raw_messages ON DELETE SET NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
