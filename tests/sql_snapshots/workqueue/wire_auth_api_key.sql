-- wire_auth_api_key, from workqueue/sql/wire.sql (expanded)
SELECT k.key_hash, k.revoked, e.id, e.kind,
    k.site_wide OR EXISTS (SELECT 1 FROM work_api_key_environments ke WHERE ke.apikey_id = k.id) AS usable
FROM work_api_keys k
LEFT JOIN work_environments e ON e.id = %(environment_id)s
    AND (
        k.site_wide
        OR EXISTS (
            SELECT 1 FROM work_api_key_environments ke WHERE ke.apikey_id = k.id AND ke.environment_id = e.id
        )
    )
WHERE k.key_hash = %(digest)s;
