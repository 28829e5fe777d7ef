-- The agent's sandbox (SPEC §8 Sandbox): the settings each launch ran under, and the
-- launch outcome of a successful run whose commits could not reach the trunk.
ALTER TABLE synedre.launches ADD COLUMN sandbox jsonb;

ALTER TABLE synedre.email_states DROP CONSTRAINT email_states_status_check;
ALTER TABLE synedre.email_states ADD CONSTRAINT email_states_status_check CHECK (status IN (
  'received','parse_failed','scanning','scanned','blocked_unsafe_attachment','reading','read',
  'classifying','classified','classify_failed','materializing','materialized','noise',
  'spawning','spawned','spawn_failed','merge_failed','deploying','deployed','qa_planning','qa',
  'qa_passed','qa_failed','report_due','reporting','actioned','orchestration_failed','escalated'));
