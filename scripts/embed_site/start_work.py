"""Run in the embedded site (manage.py shell): enqueue an operation and a task; print their ids."""

import json

from shop.kinds import ExportRequest
from shop.tasks import add

import operations

op = operations.start("shop.export", ExportRequest(account_id=7), owner="1")
result = add.enqueue(2, 3)
print("EMBED_JSON " + json.dumps({"op": op.id, "task": result.id}))
