-- Proofs every host can read (issue 16, item 7): QA screenshots, mock-up diff images and
-- mock-ups live here, keyed by the sha256 of their bytes, written once; a host's files
-- under its state directory are only a cache of these rows (synedre/db/proofs.py).
CREATE TABLE synedre.proofs (
  sha256 text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  kind text NOT NULL CHECK (kind IN ('screenshot', 'diff', 'mockup')),
  mime text NOT NULL,
  size integer NOT NULL,
  content bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- the key is the content's: a row cannot claim bytes it does not hold
  CONSTRAINT proofs_content_addressed CHECK (sha256 = encode(sha256(content), 'hex')
                                             AND size = octet_length(content))
);
-- PNG and JPEG are compressed already: store them out of line without trying again.
ALTER TABLE synedre.proofs ALTER COLUMN content SET STORAGE EXTERNAL;

-- Written once: the fleet inserts (ON CONFLICT DO NOTHING) and reads, never rewrites.
-- The agent role gets nothing of it (0008 granted it only what its work needs).
REVOKE UPDATE ON synedre.proofs FROM synedre_app;

ALTER TABLE synedre.qa_checks
  ADD COLUMN screenshot_proof text REFERENCES synedre.proofs,
  ADD COLUMN diff_proof text REFERENCES synedre.proofs;
ALTER TABLE synedre.mockups ADD COLUMN proof text REFERENCES synedre.proofs;
