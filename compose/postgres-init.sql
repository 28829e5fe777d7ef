-- Run once by the postgres image, when its data directory is created: the application
-- role the fleet logs in as (SPEC §13: it owns nothing, never runs DDL). Its password is
-- read from the compose secret by psql itself, so it appears on no command line.
-- Migrations (`synedre db upgrade`, as the superuser) grant it its rights; 0001 creates
-- the role only when it does not exist yet.
\set app_password `cat /run/secrets/synedre_app_password`
CREATE ROLE synedre_app LOGIN PASSWORD :'app_password';
