-- Keep the agent in its lane (SPEC §8, §13): each launch records the tools it really got
-- ({"kind", "allowed", "disallowed"}: the built-in list of its prompt kind, narrowed by
-- SYNEDRE_AGENT_TOOLS, and the deny rules), and where its own contract file was, outside
-- the repository, so the salvage and an operator can find it.
ALTER TABLE synedre.launches ADD COLUMN agent_tools jsonb;
ALTER TABLE synedre.launches ADD COLUMN contract_path text;
