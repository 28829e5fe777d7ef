-- Issue 17: the founder steers by replying. A launch a policy rule holds waits in
-- `awaiting_approval` for his OK; `refused` ends a message he (or an operator) refused, or
-- whose request expired. One approval request per message, consumed once (waiting -> approved
-- | refused | expired, a conditional UPDATE); his verdicts on recaps are kept beside it.
ALTER TABLE synedre.email_states DROP CONSTRAINT email_states_status_check;
ALTER TABLE synedre.email_states ADD CONSTRAINT email_states_status_check CHECK (status IN (
  'received','parse_failed','scanning','scanned','blocked_unsafe_attachment','reading','read',
  'classifying','classified','classify_failed','materializing','materialized','noise',
  'awaiting_approval','refused',
  'spawning','spawned','spawn_failed','merge_failed','deploying','deployed','qa_planning','qa',
  'qa_passed','qa_failed','report_due','reporting','actioned','orchestration_failed','escalated'));

CREATE TABLE synedre.approvals (
  id bigserial PRIMARY KEY,
  message_id bigint NOT NULL UNIQUE REFERENCES synedre.raw_messages ON DELETE CASCADE,
  rule text NOT NULL,                    -- the policy rule that asked (its name, as audited)
  token text NOT NULL,                   -- random, in the request's subject and body
  facts jsonb NOT NULL,                  -- what the request told the founder
  status text NOT NULL DEFAULT 'waiting' CHECK (status IN ('waiting','approved','refused','expired')),
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  decided_at timestamptz,
  decided_by text,                       -- the founder's address, or operator:<OS user>
  decision_message_id text,              -- the reply's Message-ID (NULL from the shell)
  note text,
  CHECK ((status = 'waiting') = (decided_at IS NULL))
);
CREATE INDEX approvals_waiting ON synedre.approvals (expires_at) WHERE status = 'waiting';

-- The launch an approval released (who, when and the reply are on the approval).
ALTER TABLE synedre.launches ADD COLUMN approval_id bigint REFERENCES synedre.approvals;

-- The founder's verdict on a recap: OK (accepted) or NON (rejected, with his note).
CREATE TABLE synedre.recap_verdicts (
  message_id bigint PRIMARY KEY REFERENCES synedre.raw_messages ON DELETE CASCADE,
  verdict text NOT NULL CHECK (verdict IN ('accepted','rejected')),
  note text,
  reply_message_id text NOT NULL,
  decided_at timestamptz NOT NULL DEFAULT now()
);

-- A message that continues a recap's thread: the message the recap was about (its launch
-- prompt carries that recap's summary and it works on the same branch).
ALTER TABLE synedre.email_states ADD COLUMN follows_message_id bigint REFERENCES synedre.raw_messages;
