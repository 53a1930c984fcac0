"""Workflow kinds for tests/operations/test_workflows*.py. Each step counts its runs as Sample
rows named ``<what>:<op id>`` (value: the step's attempt in this call), so a test can see
what ran how often after crashes and resumes.

- test.wf.onboard: create (plain) → sleep ``sleep`` s → wait "approved" (``timeout`` s) →
  invoice (transaction=True) → returns what it saw.
- test.wf.crashy: a (plain) → b (plain, ``pause_b`` s after counting) → c (transaction=True:
  counts, then ``pause_c`` s, inside the step's transaction) → d (plain) → returns the sum.
  ``between`` s pass between steps.
- test.wf.waiter: waits for "go" (``timeout`` s) then returns the payload.
- test.wf.twice: waits for "go" twice and returns both payloads (signals queue in order).
- test.wf.nondet: calls step one, waits for "go", then calls step one again; when the Sample
  ``flip:<op id>`` exists at resume time it calls step two first instead (nondeterminism).
- test.wf.four: four numbered steps; step n returns n (fork tests).
- test.wf.flaky: a step failing its first ``fails`` calls (retries=3, backoff 0).
- test.wf.doomed: a step that always fails with Fail("card_declined") (retries=1).
- test.wf.patched: records whether wf.patched("v2") was true.
- test.wf.child: starts a test.ops.hold child, then waits for "never" (no timeout).
- test.wf.async: async steps around an async sleep of ``sleep`` s.
"""

import asyncio
import time

import operations
from tests.testapp.models import Sample


def count(what: str, op_id: str) -> int:
    Sample.objects.create(name=f"{what}:{op_id}", value=1)
    return Sample.objects.filter(name=f"{what}:{op_id}").count()


@operations.step()
def create(op_id: str) -> dict:
    count("create", op_id)
    return {"id": 42}


@operations.step(transaction=True)
def invoice(op_id: str, amount: int) -> int:
    count("invoice", op_id)
    return amount * 2


@operations.workflow("test.wf.onboard")
def onboard(request, wf):
    account = create(wf.id)
    wf.sleep(request.get("sleep", 0))
    approval = wf.wait("approved", timeout=request.get("timeout", 30))
    total = invoice(wf.id, 100)
    return {"account": account["id"], "approval": approval, "invoice": total, "key": wf.step_key()}


@operations.step()
def step_a(op_id: str) -> int:
    count("a", op_id)
    return 1


@operations.step()
def step_b(op_id: str, pause: float) -> int:
    count("b", op_id)
    time.sleep(pause)
    return 2


@operations.step(transaction=True)
def step_c(op_id: str, pause: float) -> int:
    count("c", op_id)
    time.sleep(pause)
    return 3


@operations.step()
def step_d(op_id: str) -> int:
    count("d", op_id)
    return 4


@operations.workflow("test.wf.crashy", max_attempts=10)
def crashy(request, wf):
    between = float(request.get("between", 0))
    total = step_a(wf.id)
    time.sleep(between)
    total += step_b(wf.id, float(request.get("pause_b", 0)))
    time.sleep(between)
    total += step_c(wf.id, float(request.get("pause_c", 0)))
    time.sleep(between)
    total += step_d(wf.id)
    return {"total": total}


@operations.workflow("test.wf.waiter")
def waiter(request, wf):
    return {"got": wf.wait("go", timeout=request.get("timeout"))}


@operations.workflow("test.wf.twice")
def twice(request, wf):
    return {"first": wf.wait("go"), "second": wf.wait("go")}


@operations.step()
def one(op_id: str) -> str:
    count("one", op_id)
    return "one"


@operations.step()
def two(op_id: str) -> str:
    count("two", op_id)
    return "two"


@operations.workflow("test.wf.nondet")
def nondet(request, wf):
    if Sample.objects.filter(name=f"flip:{wf.id}").exists():
        two(wf.id)
    one(wf.id)
    wf.wait("go", timeout=60)
    return one(wf.id)


def numbered(n: int):
    @operations.step(name=f"step{n}")
    def run(op_id: str) -> int:
        count(f"s{n}", op_id)
        return n

    return run


STEPS = [numbered(n) for n in range(4)]


@operations.workflow("test.wf.four")
def four(request, wf):
    return {"steps": [s(wf.id) for s in STEPS]}


@operations.step(retries=3, backoff=0)
def flaky_call(op_id: str, fails: int) -> str:
    if count("flaky", op_id) <= fails:
        raise ConnectionError("the payment API timed out")
    return "paid"


@operations.workflow("test.wf.flaky")
def flaky(request, wf):
    return {"paid": flaky_call(wf.id, int(request.get("fails", 2)))}


@operations.step(retries=1, backoff=0)
def charge(op_id: str) -> str:
    count("charge", op_id)
    raise operations.Fail("card_declined", "the card was declined")


@operations.workflow("test.wf.doomed")
def doomed(request, wf):
    return charge(wf.id)


@operations.workflow("test.wf.patched")
def patched(request, wf):
    first = one(wf.id)
    wf.wait("go", timeout=60)
    new_path = wf.patched("v2") if Sample.objects.filter(name=f"shipped:{wf.id}").exists() else False
    return {"first": first, "v2": new_path, "last": two(wf.id)}


@operations.workflow("test.wf.child")
def with_child(request, wf):
    child = wf.start("test.ops.hold", {"seconds": 60})
    wf.wait("never")
    return {"child": child.id}


@operations.step()
async def async_count(op_id: str, what: str) -> str:
    await asyncio.sleep(0)
    from asgiref.sync import sync_to_async

    await sync_to_async(count)(what, op_id)
    return what


@operations.workflow("test.wf.async")
async def async_flow(request, wf):
    first = await async_count(wf.id, "early")
    await wf.sleep(request.get("sleep", 0.2))
    got = await wf.wait("go", timeout=request.get("timeout", 30))
    last = await async_count(wf.id, "late")
    return {"first": first, "got": got, "last": last}
