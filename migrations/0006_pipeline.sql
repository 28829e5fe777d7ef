-- The explicit pipeline (synedre/pipeline.py): every stage has an in-progress status and
-- a claim attempt that fences its write; OCR and materialization get statuses of their own.
ALTER TABLE synedre.email_states DROP CONSTRAINT email_states_status_check;
ALTER TABLE synedre.email_states ADD CONSTRAINT email_states_status_check CHECK (status IN (
  'received','parse_failed','scanning','scanned','blocked_unsafe_attachment','reading','read',
  'classifying','classified','classify_failed','materializing','materialized','noise',
  'spawning','spawned','spawn_failed','deploying','qa','actioned','orchestration_failed',
  'escalated'));

-- The claim: which attempt owns the message now, since when; why it waits, until when.
ALTER TABLE synedre.email_states
  ADD COLUMN stage_attempt integer NOT NULL DEFAULT 0,
  ADD COLUMN claimed_at timestamptz,
  ADD COLUMN waiting_reason text,
  ADD COLUMN waiting_until timestamptz;

-- "materialized" used to mean "classified with a link set"; OCR done used to mean "an
-- ocr_extracted audit exists". Existing rows move to the statuses that now say so.
UPDATE synedre.email_states SET status = 'materialized'
 WHERE status = 'classified' AND num_nonnulls(run_id, question_id, negotiation_id, advice_id) = 1;
UPDATE synedre.email_states s SET status = 'read'
 WHERE status = 'scanned'
   AND EXISTS (SELECT 1 FROM synedre.audit_log a WHERE a.message_id = s.message_id AND a.event = 'ocr_extracted');

-- Every stored embedding says which model made it: vectors of two models are not comparable.
ALTER TABLE synedre.lessons ADD COLUMN embedding_model text;
UPDATE synedre.lessons SET embedding_model = 'unknown' WHERE embedding IS NOT NULL;
ALTER TABLE synedre.lessons ADD CONSTRAINT lessons_embedding_model
  CHECK (embedding IS NULL OR embedding_model IS NOT NULL);
