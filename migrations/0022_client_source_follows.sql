-- A new request the founder sends in a recap's thread inherits the client of the message it
-- follows (issue 28): its client, so its tenant and repository, the approval policy's "first
-- launch" and the request mail's client. Its resolution says where the client came from.
ALTER TABLE synedre.email_states DROP CONSTRAINT IF EXISTS email_states_client_source_check;
ALTER TABLE synedre.email_states ADD CONSTRAINT email_states_client_source_check
  CHECK (client_source IN ('envelope', 'forwarded-body', 'follows', 'unknown'));
