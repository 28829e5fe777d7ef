-- Outbound mail (SPEC §9.6, §9.8): the recap and the alerts Atlas mails to the founder.
-- One row per (message, kind) is the exactly-once claim: the draft is saved once, the send
-- is claimed once (draft_saved -> sending, conditional), and a send that may have left is
-- never repeated automatically. The recipient is not stored: it is always the founder.
CREATE TABLE synedre.outbound_mail (
  id bigserial PRIMARY KEY,
  message_id bigint NOT NULL REFERENCES synedre.raw_messages ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
  mailbox text NOT NULL,                 -- mailbox-registry id of the sender (e.g. atlas)
  rfc_message_id text NOT NULL UNIQUE,   -- derived from message + kind: deterministic
  status text NOT NULL CHECK (status IN ('drafting','draft_saved','sending','sent','send_unknown')),
  attempts integer NOT NULL DEFAULT 1,   -- the claim's fencing token
  claimed_at timestamptz,                -- NULL: a released claim, free to take again
  draft_folder text,
  draft_uidvalidity bigint,
  draft_uid bigint,
  sent_at timestamptz,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (message_id, kind),
  CHECK (status = 'drafting' OR draft_uid IS NOT NULL),
  CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);
-- What an operator has to look at: a send that may or may not have left.
CREATE INDEX outbound_mail_unknown ON synedre.outbound_mail (updated_at) WHERE status = 'send_unknown';
