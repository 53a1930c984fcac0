-- table_row_estimate, from workqueue/sql/dashboard.sql (expanded)
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%(table)s::text);
