-- wire_auth_environment_key, from workqueue/sql/wire.sql (expanded)
SELECT e.id, e.kind, e.key_hash
FROM work_environments e
WHERE e.key_hash = %(digest)s;
