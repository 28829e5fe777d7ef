-- The read-only agent role of 0008 is gone (issue 25): no launch was ever handed it (the
-- agent's sandbox lets no database connection through), and the embedded server let it in
-- on loopback TCP without a password. Its view goes with it: nothing else reads it.
DROP VIEW IF EXISTS synedre.agent_doctrines;

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'synedre_agent') THEN
    RETURN;
  END IF;
  -- First no login, so that whatever follows cannot fail open.
  ALTER ROLE synedre_agent NOLOGIN;
  BEGIN  -- its open sessions, if the migrator may end them (a superuser, the embedded server's)
    PERFORM pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'synedre_agent';
  EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'synedre_agent: its open sessions were left to end (%)', SQLERRM;
  END;
  -- What 0008 granted, revoked by name: a migrator that is not a superuser owns these
  -- objects and may revoke, where it may not run DROP OWNED BY.
  REVOKE ALL ON ALL TABLES IN SCHEMA synedre FROM synedre_agent;
  REVOKE ALL ON ALL SEQUENCES IN SCHEMA synedre FROM synedre_agent;
  REVOKE ALL ON SCHEMA synedre FROM synedre_agent;
  BEGIN  -- anything else it holds in this database, or created while it could log in
    DROP OWNED BY synedre_agent;
  EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'synedre_agent: DROP OWNED BY needs a superuser (%)', SQLERRM;
  END;
  BEGIN
    DROP ROLE synedre_agent;
  EXCEPTION WHEN dependent_objects_still_exist THEN
    -- Roles are the cluster's: another database that ran 0008 still grants it something.
    -- It stays without login until that database runs this migration and drops it.
    RAISE NOTICE 'synedre_agent kept, NOLOGIN: %', SQLERRM;
  END;
END $$;
