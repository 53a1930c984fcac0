"""The HTTP pull API for self-hosted workers (the wire), compatible with the Anthropic SDK.

- ``store``: the verbs on ``WorkItem.objects`` (poll, ack, heartbeat, stop, update_metadata,
  get_work, list_page, stats, record_poll); their SQL is ``workqueue/sql/wire.sql``;
- ``views`` / ``urls``: thin JSON views under ``v1/environments/<env>/work…``;
- ``auth``: environment keys and control-plane API keys; ``errors``: the Anthropic envelope;
- ``serializers``: the wire objects out and the request inputs in;
- ``wakeups``: blocked polls woken by enqueue notifications.

See docs/self-hosted-workers.md.
"""
