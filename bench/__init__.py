"""The benchmark behind `manage.py benchqueue` / `make bench` (see docs/performance.md).

Figures are measured against a throwaway database on the configured server, with real
`runworker` processes, a real gunicorn for the wire API, and a raw-SQL ceiling run from a
tight psycopg loop with the very same statements, so framework overhead is visible directly.
"""
