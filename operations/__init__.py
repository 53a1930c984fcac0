"""Long-running operations (AIP-151 style) on the workqueue."""
