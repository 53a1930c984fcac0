"""Runner pools: what runs handlers (threads, an event loop)."""
