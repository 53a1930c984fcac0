"""A polled item carries the enqueuer's W3C trace context in the poll response's headers.

Through the official SDK's raw response API on a live server, as docs/self-hosted-workers.md
shows a worker doing it: the headers, then the parsed item, then a span in the same trace.
"""

from __future__ import annotations

import time

import pytest

from tests.workqueue.wire.helpers import by_key, enqueue

pytestmark = pytest.mark.django_db(transaction=True)

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def poll(sdk, env, **kwargs):
    """(response headers, parsed item) of one SDK poll."""
    raw = sdk(env.key).beta.environments.work.with_raw_response.poll(env.id, **kwargs)
    return raw.headers, raw.parse()


def test_an_item_enqueued_inside_a_span_polls_with_that_spans_traceparent_and_joins_its_trace(sdk, env, otel):
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    with trace.get_tracer("tests").start_as_current_span("POST /sessions") as request_span:
        enqueue(env, 1)
    request = request_span.get_span_context()

    headers, item = poll(sdk, env, anthropic_worker_id="w1")

    assert item is not None and item.data.id == "sess_0"
    assert headers["traceparent"] == f"00-{request.trace_id:032x}-{request.span_id:016x}-{request.trace_flags:02x}"
    assert "tracestate" not in headers  # the span had none
    # The worker's side, as the docs show it: extract, then run inside a span of that trace.
    parent = TraceContextTextMapPropagator().extract(dict(headers))
    with trace.get_tracer("worker").start_as_current_span("run session", context=parent) as run:
        pass
    assert run.get_span_context().trace_id == request.trace_id
    assert run.parent is not None and run.parent.span_id == request.span_id


def test_traceparent_and_tracestate_survive_the_id_rotation_of_a_re_poll(sdk, env):
    context = {"traceparent": PARENT, "tracestate": "vendor=abc,other=x y"}
    enqueue(env, 1, trace_context=context)

    headers, first = poll(sdk, env, anthropic_worker_id="w1", reclaim_older_than_ms=1)
    assert (headers["traceparent"], headers["tracestate"]) == (PARENT, "vendor=abc,other=x y")

    time.sleep(0.05)  # the 1 ms reservation lapses: the next poll re-hands it out under a new id
    headers, again = poll(sdk, env, anthropic_worker_id="w2")
    assert again is not None and again.id != first.id and again.data.id == first.data.id
    assert (headers["traceparent"], headers["tracestate"]) == (PARENT, "vendor=abc,other=x y")
    assert by_key("sess_0").trace_context == context


def test_an_item_without_a_trace_context_and_an_empty_poll_carry_no_trace_headers(sdk, env):
    enqueue(env, 1, trace_context=None)

    headers, item = poll(sdk, env)
    assert item is not None
    assert "traceparent" not in headers and "tracestate" not in headers

    headers, nothing = poll(sdk, env)
    assert nothing is None
    assert "traceparent" not in headers and "tracestate" not in headers


@pytest.mark.parametrize(
    "context",
    [
        {"traceparent": PARENT + "\r\nx-injected: 1", "tracestate": "a=b"},
        {"traceparent": PARENT.upper()},
        {"traceparent": "ff" + PARENT[2:]},  # version ff is invalid
        {"traceparent": 42},
        {"tracestate": "a=b"},
    ],
    ids=["header-injection", "uppercase", "version-ff", "not-a-string", "state-alone"],
)
def test_a_malformed_stored_context_sends_no_trace_headers_and_the_poll_still_succeeds(sdk, env, context):
    enqueue(env, 1, trace_context=context)

    headers, item = poll(sdk, env)

    assert item is not None and item.data.id == "sess_0"
    assert "traceparent" not in headers and "tracestate" not in headers and "x-injected" not in headers


def test_a_tracestate_that_is_not_printable_ascii_is_dropped_and_the_traceparent_kept(sdk, env):
    enqueue(env, 1, trace_context={"traceparent": PARENT, "tracestate": "a=b\nc=d"})

    headers, item = poll(sdk, env)

    assert item is not None
    assert headers["traceparent"] == PARENT and "tracestate" not in headers
