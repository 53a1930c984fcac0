"""Admin for the work queue (dashboard, work items, environments, API keys, workers)."""
