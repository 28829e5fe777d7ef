-- What a launch changed (issue 28, SPEC §9.8), taken by the fleet from the branch it merged:
-- the recap shows its files with their lines added and removed, its branch and commits, and
-- attaches its patch (redacted with the launch's redactor, cut at a hunk boundary to
-- SYNEDRE_RECAP_PATCH_MAX_BYTES); a follow-up's approval request shows the previous one's.
CREATE TABLE synedre.launch_changes (
  launch_id bigint PRIMARY KEY REFERENCES synedre.launches ON DELETE CASCADE,
  branch text NOT NULL,
  base_sha text NOT NULL,             -- where the agent started: the patch applies there
  head_sha text NOT NULL,             -- its branch as the fleet brought it back
  commits jsonb NOT NULL,             -- [[sha, subject]], oldest first (subjects redacted)
  files jsonb NOT NULL,               -- [{"path", "added", "removed"}], null counts for a binary file
  patch bytea NOT NULL,               -- redacted, cut
  patch_bytes integer NOT NULL,       -- the whole patch's size before the cut
  left_out jsonb NOT NULL DEFAULT '[]',  -- files the cut left out, in part or whole
  altered boolean NOT NULL DEFAULT false,  -- a line of the base was redacted: it no longer applies as is
  has_binary boolean NOT NULL DEFAULT false,  -- a binary file's bytes are not in the patch
  created_at timestamptz NOT NULL DEFAULT now()
);
