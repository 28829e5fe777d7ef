-- `draft_reply` was seeded by 0003, but the recap drafts through `atlas_draft_reply` (0009):
-- no code asks for it, and `synedre status` reported a key missing for a feature nobody uses.
DELETE FROM synedre.ai_routing WHERE feature = 'draft_reply';
