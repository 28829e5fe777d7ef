-- Least privilege (SPEC §13): the fleet logs in as the application role, the agent as a
-- role that reads only what its work needs: the roster, the lessons, the global doctrines.
-- Nothing with message content (raw_messages, attachments, email_states), nothing of
-- the fleet's books (audit_log, launches, launch_events), no other client's rows: the
-- doctrines of a chantier belong to its client, so only the global ones are shown.
-- Creating roles needs CREATEROLE (as 0001 did); the embedded server runs this as its superuser.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'synedre_agent') THEN
    CREATE ROLE synedre_agent LOGIN;
  END IF;
END $$;
ALTER ROLE synedre_app LOGIN;
ALTER ROLE synedre_agent LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;

REVOKE ALL ON ALL TABLES IN SCHEMA synedre FROM synedre_agent;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA synedre FROM synedre_agent;
GRANT USAGE ON SCHEMA synedre TO synedre_agent;
GRANT SELECT ON synedre.agents, synedre.agent_skills, synedre.agent_tools, synedre.agent_relations,
                synedre.lessons TO synedre_agent;

CREATE VIEW synedre.agent_doctrines WITH (security_barrier) AS
  SELECT id, title, body, veto_glm, created_at FROM synedre.doctrines WHERE chantier_id IS NULL;
GRANT SELECT ON synedre.agent_doctrines TO synedre_agent;
