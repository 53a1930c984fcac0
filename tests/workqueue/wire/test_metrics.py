"""/metrics: Prometheus text with the queue and environment gauges, read at scrape time."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.workqueue.wire.helpers import enqueue
from workqueue.models import Poller
from workqueue.testing import WorkItemFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_figures():
    from workqueue import metrics

    metrics.clear_cache()  # figures cached by an earlier test are not this test's


def scrape(http) -> dict[tuple[str, tuple], float]:
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_expose_queue_and_environment_gauges(http, sdk, env, cloud_env):
    enqueue(env, 3)
    enqueue(cloud_env, 2, prefix="cloud")
    enqueue(None, 3, queue="test.noop", prefix="noop")
    work = sdk(env.key).beta.environments.work
    polled = work.poll(env.id, anthropic_worker_id="w1", reclaim_older_than_ms=60_000)
    work.ack(polled.id, environment_id=env.id)
    work.poll(env.id, anthropic_worker_id="w2", reclaim_older_than_ms=60_000)
    WorkItemFactory(queue="test.noop", key="noop_lapsed", lapsed=True)  # running, and stuck

    samples = scrape(http)
    queue = lambda name, q: samples[(f"workqueue_queue_{name}", (("queue", q),))]  # noqa: E731
    environment = lambda name, e: samples[(f"workqueue_environment_{name}", (("environment", e),))]  # noqa: E731
    # test.wire: one wire item ready, one reserved, one acked; the cloud environment's two are ready.
    assert (queue("depth", "test.wire"), queue("pending", "test.wire"), queue("running", "test.wire")) == (3, 1, 1)
    assert (queue("depth", "test.noop"), queue("running", "test.noop"), queue("stuck", "test.noop")) == (3, 1, 1)
    assert queue("depth", "test.capped") == 0  # every configured queue is reported, idle or not
    assert (environment("depth", env.id), environment("pending", env.id)) == (1, 1)
    assert environment("workers_polling", env.id) == Poller.objects.count() == 2
    assert ("workqueue_environment_depth", (("environment", cloud_env.id),)) not in samples  # self_hosted only


def _with(**extra):
    from django.conf import settings
    from django.test import override_settings

    return override_settings(WORKQUEUE={**settings.WORKQUEUE, **extra})


def _depth(response, queue: str) -> float:
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == "workqueue_queue_depth" and sample.labels == {"queue": queue}:
                return sample.value
    raise AssertionError(f"no depth for {queue}")


def test_metrics_take_a_bearer_token_when_one_is_set(client):
    with _with(METRICS_TOKEN="scrape-me", METRICS_CACHE=0):
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic scrape-me"}):
            refused = client.get("/metrics", headers=headers)
            assert refused.status_code == 401, headers
            assert refused["WWW-Authenticate"].startswith("Bearer")
            assert b"workqueue_queue_depth" not in refused.content
        allowed = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
        assert allowed.status_code == 200 and b"workqueue_queue_depth" in allowed.content
    assert client.get("/metrics").status_code == 200  # no token set (the default): public


def test_scrapes_within_the_cache_window_do_not_touch_the_database(client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    enqueue(None, 2, queue="test.noop", prefix="a")
    with _with(METRICS_CACHE=3600):
        first = client.get("/metrics")
        enqueue(None, 3, queue="test.noop", prefix="b")
        with CaptureQueriesContext(connection) as queries:
            again = client.get("/metrics")
        assert len(queries) == 0
        assert _depth(first, "test.noop") == _depth(again, "test.noop") == 2
    with _with(METRICS_CACHE=0):  # no cache: every scrape reads
        assert _depth(client.get("/metrics"), "test.noop") == 5
