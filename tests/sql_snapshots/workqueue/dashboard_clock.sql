-- dashboard_clock, from workqueue/sql/dashboard.sql (expanded)
SELECT statement_timestamp();
