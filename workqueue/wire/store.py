"""Wire-lane verbs of ``WorkItem.objects`` (poll, ack, heartbeat, stop, ...). SQL in sql/wire.sql."""


class WireLane:
    """Mixed into WorkItemManager: the verbs the HTTP pull API calls."""
