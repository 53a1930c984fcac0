"""Operation kinds for the demo, so a newcomer sees progress bars move, a retry and a cancel.

- ``demo.export``: fans out over ``units`` units, advancing a ``records`` count per unit,
  honouring cancellation between units;
- ``demo.flaky``: fails its first ``failures`` attempts, then succeeds;
- ``demo.doomed``: fails for good with its own code;
- ``demo.bundle``: a batch's ``then``: reads the batch and its children's results;
- ``demo.step``: a chain step: carries the previous step's total on;
- ``demo.async_fetch``: an ``async def`` kind, run on the worker's event loop.
"""

import asyncio
import time
from dataclasses import dataclass

import operations


@dataclass
class ExportRequest:
    units: int = 5
    records_per_unit: int = 1000
    seconds_per_unit: float = 1.0


@operations.register("demo.export", request_type=ExportRequest, count_label="records")
def export(request: ExportRequest, reporter: operations.Reporter):
    reporter.set_units(request.units)
    for n in range(1, request.units + 1):
        if reporter.is_cancelled():  # a caller's cancel: the export is not wanted
            raise operations.Unretryable(
                operations.Fail("cancelled", "stopped after %d of %d units", n - 1, request.units)
            )
        if reporter.stop_reason is not None:  # a shutdown or a lost hold: the next attempt goes on
            return None
        reporter.start_unit(f"part-{n}")
        reporter.say("exporting part %d of %d", n, request.units)
        step = max(1, request.records_per_unit // 10)
        for _ in range(10):
            time.sleep(request.seconds_per_unit / 10)
            reporter.advance(step)
        reporter.finish_unit()
    return operations.Result(uri=f"memory://exports/{reporter.attempt.id}.csv", detail={"units": request.units})


@operations.register("demo.flaky", count_label="tries", max_attempts=4)
def flaky(request, reporter: operations.Reporter):
    failures = int((request or {}).get("failures", 2))
    reporter.advance(1)
    if reporter.attempt.number <= failures:
        raise operations.Fail("upstream_unavailable", "the upstream was down (attempt %d)", reporter.attempt.number)
    return {"succeeded_on_attempt": reporter.attempt.number}


@operations.register("demo.doomed")
def doomed(request, reporter: operations.Reporter):
    reporter.say("checking the subject")
    raise operations.Unretryable(
        operations.Fail("no_such_subject", "subject %s does not exist", (request or {}).get("subject", "?"))
    )


@operations.register("demo.nothing")
def nothing(request, reporter: operations.Reporter):
    """Do nothing: the benchmark's no-op operation."""
    return None


@operations.register("demo.bundle", count_label="exports")
def bundle(request, reporter: operations.Reporter):
    """The demo batch's ``then``: runs once, after every export ended; reads them all."""
    batch = reporter.parent
    uris, after = [], None
    while True:
        page, after = operations.children(batch.id, after=after, limit=100)
        for child in page:
            reporter.advance(1)
            if child.result is not None and child.result.uri:
                uris.append(child.result.uri)
        if after is None:
            break
    reporter.say("bundled %d exports of batch %s (%s)", len(uris), batch.id, batch.state)
    return operations.Result(uri=f"memory://bundles/{batch.id}.zip", detail={"exports": uris, "batch": batch.state})


@operations.register("demo.step")
def step(request, reporter: operations.Reporter):
    """A chain step: waits ``seconds``, then adds ``add`` to the previous step's total."""
    previous = reporter.previous
    before = previous.result.detail["total"] if previous is not None else 0
    reporter.say("%s: %d + %d", (request or {}).get("name", "step"), before, int((request or {}).get("add", 1)))
    time.sleep(float((request or {}).get("seconds", 1.0)))
    return {"total": before + int((request or {}).get("add", 1))}


@operations.register("demo.async_fetch", count_label="pages")
async def async_fetch(request, reporter: operations.AsyncReporter):
    """An ``async def`` kind: awaits ``pages`` fake fetches of ``seconds`` each, many at once per worker."""
    pages = int((request or {}).get("pages", 5))
    reporter.set_units(pages)
    for n in range(1, pages + 1):
        reporter.start_unit(f"page-{n}")
        await asyncio.sleep(float((request or {}).get("seconds", 0.5)))  # a cancel lands here
        reporter.advance(1)
        reporter.finish_unit()
    await reporter.flush()
    return {"pages": pages}


# -- workflows (the benchmark's, and a showcase) ----------------------------------------


@operations.step()
def nothing_step(n: int) -> int:
    return n


@operations.workflow("demo.five_steps")
def five_steps(request, wf):
    """Five no-op checkpointed steps: what a step costs (``benchqueue --only workflows``)."""
    return {"steps": [nothing_step(n) for n in range(5)]}


@operations.workflow("demo.await_signal")
def await_signal(request, wf):
    """Waits for the signal "go" (the benchmark signals a thousand at once)."""
    return {"got": wf.wait("go", timeout=request.get("timeout", 3600) if request else 3600)}
