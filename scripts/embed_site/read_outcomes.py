"""Run in the embedded site after the worker: what became of the work."""

import json
import os

from shop.tasks import add

from operations.models import Operation
from workqueue.models import WorkItem

ids = json.loads(os.environ["EMBED_IDS"])
op = Operation.objects.get(pk=ids["op"])
item = WorkItem.objects.get(queue="emails", key="welcome:1")
result = add.get_result(ids["task"])
print(
    "EMBED_JSON "
    + json.dumps(
        {
            "op_state": op.state,
            "op_done": op.done,
            "op_units": [op.units_done, op.units_total],
            "item_state": item.state,
            "item_outcome": item.outcome,
            "task_status": str(result.status).rsplit(".", 1)[-1],
            "task_return": result.return_value,
        }
    )
)
