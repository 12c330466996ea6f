-- The role contextstore's server runs as: it logs in and owns nothing. PostgreSQL's image runs
-- this once, when it first makes the database; 'contextstore db grant-service-role
-- contextstore_service' (the compose file's migrate service) then grants it what it needs.
-- The password is for a developer machine only.
CREATE ROLE contextstore_service LOGIN PASSWORD 'contextstore_service';
