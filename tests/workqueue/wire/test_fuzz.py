"""Bad input on every endpoint: a clear 4xx in the error envelope, never a 500, never a changed row."""

from __future__ import annotations

import json

import pytest

from tests.workqueue.wire.helpers import by_key, enqueue, snapshot
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

REFUSALS = {400, 401, 404, 405, 409, 412, 413}


@pytest.fixture
def items(sdk, env):
    """One item in each interesting state: queued, active (heartbeating) and stopped."""
    enqueue(env, 3, metadata={"k": "v"})
    work = sdk(env.key).beta.environments.work
    active = work.poll(env.id, reclaim_older_than_ms=600_000)
    work.ack(active.id, environment_id=env.id)
    work.heartbeat(active.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    stopped = work.poll(env.id, reclaim_older_than_ms=600_000)
    work.stop(stopped.id, environment_id=env.id, force=True)
    return {"queued": by_key("sess_2").public_id, "active": active.id, "stopped": stopped.id}


def bad_requests(env_id: str, items: dict) -> list[tuple[str, str, dict, str]]:
    """(method, path, kwargs, key kind) for requests that must all be refused."""
    base = f"/v1/environments/{env_id}/work"
    active, queued = items["active"], items["queued"]
    deep = b"[" * 50_000 + b"]" * 50_000
    bodies = [
        b"{",
        b"not json",
        b"\xff\xfe\x00",
        b"null",
        b"[]",
        b'"text"',
        b"1e999",
        deep,
        b'{"unknown": 1}',
        b'{"metadata": 5}',
        b"x" * (2 * 1024 * 1024),
    ]
    requests: list[tuple[str, str, dict, str]] = []
    # Path ids: unicode, too long, wrong shape, NUL, unknown.
    for work_id in (
        "wörk_1",
        "work_" + "a" * 200,
        "session_1",
        "work_%00",
        "work_",
        "work_1%20OR%201=1",
        "work_unknown",
    ):
        for suffix, method, kind in (
            ("", "GET", "api"),
            ("", "POST", "api"),
            ("/ack", "POST", "env"),
            ("/heartbeat?expected_last_heartbeat=NO_HEARTBEAT", "POST", "env"),
            ("/stop", "POST", "either"),
        ):
            requests.append((method, f"{base}/{work_id}{suffix}", {"json": {}}, kind))
    for env_path in ("énv_1", "env_" + "z" * 100, "env_%00", "env_nope"):
        requests.append(("GET", f"/v1/environments/{env_path}/work/poll", {}, "env"))
        requests.append(("GET", f"/v1/environments/{env_path}/work/stats", {}, "api"))
    # Poll parameters.
    for params in (
        {"block_ms": "0"},
        {"block_ms": "1000"},
        {"block_ms": "abc"},
        {"block_ms": ""},
        {"block_ms": "1.5"},
        {"block_ms": "١٢"},
        {"reclaim_older_than_ms": "0"},
        {"reclaim_older_than_ms": "-5"},
        {"reclaim_older_than_ms": "3600001"},
        {"reclaim_older_than_ms": "9" * 40},
    ):
        requests.append(("GET", f"{base}/poll", {"params": params, "headers": {"Anthropic-Worker-ID": "fuzz"}}, "env"))
    # List parameters.
    for params in (
        {"limit": "0"},
        {"limit": "101"},
        {"limit": "ten"},
        {"page": "garbage!"},
        {"page": "bm90IGEgY3Vyc29y"},
        {"page": "x" * 500},
        {"page": "MjAyNS0wMS0wMVQwMDowMDowMCswMDowMHwtMQ"},
    ):
        requests.append(("GET", base, {"params": params}, "env"))
    # Heartbeats that must not extend anything.
    hb = f"{base}/{active}/heartbeat"
    for kwargs in (
        {},
        {"params": {"expected_last_heartbeat": "NO_HEARTBEAT"}},
        {"params": {"expected_last_heartbeat": "2020-01-01T00:00:00Z"}},
        {"params": {"expected_last_heartbeat": "\u2603" * 10}},
        {"params": {"expected_last_heartbeat": "x" * 5000}},
        {"params": {"expected_last_heartbeat": "NO_HEARTBEAT", "desired_ttl_seconds": "soon"}},
        {"json": {"expected_last_heartbeat": 12}},
        {"json": {"expected_last_heartbeat": "NO_HEARTBEAT", "desired_ttl_seconds": "5"}},
        {"json": {"expected_last_heartbeat": "NO_HEARTBEAT", "desired_ttl_seconds": 5.5}},
        {"json": {"expected_last_heartbeat": "NO_HEARTBEAT", "surprise": True}},
    ):
        requests.append(("POST", hb, kwargs, "env"))
    for body in bodies:
        requests.append(("POST", hb, {"content": body}, "env"))
    # Stop bodies.
    for body in [*bodies, b'{"force": "yes"}', b'{"force": 1}', b'{"force": true, "why": "x"}']:
        requests.append(("POST", f"{base}/{queued}/stop", {"content": body}, "either"))
    requests.append(("POST", f"{base}/{items['stopped']}/stop", {"json": {"force": True}}, "either"))
    # Metadata patches.
    patches = [
        {"a": 1},
        {"a": True},
        {"a": {"nested": "x"}},
        {"a": ["x"]},
        {"k" * 65: "v"},
        {"a": "v" * 513},
        {f"k{i}": "v" for i in range(17)},
        {f"k{i}": "v" for i in range(16)},  # 16 new keys + the existing "k" = 17 after the merge
        {"": "v"},
        {"a": "nul\x00byte"},
    ]
    for patch in patches:
        requests.append(("POST", f"{base}/{queued}", {"json": {"metadata": patch}}, "api"))
    for raw in (b'{"metadata": {"a": "\\ud800"}}', b'{"metadata": {"\\udfff": "x"}}', b'{"metadata": "s"}', *bodies):
        requests.append(("POST", f"{base}/{queued}", {"content": raw}, "api"))
    # Methods nobody serves.
    for method in ("PUT", "DELETE", "PATCH"):
        requests.append((method, f"{base}/{queued}", {}, "api"))
        requests.append((method, f"{base}/poll", {}, "env"))
    requests.append(("POST", f"{base}/poll", {}, "env"))
    requests.append(("GET", f"{base}/{queued}/ack", {}, "env"))
    return requests


def test_bad_input_is_refused_cleanly_and_changes_nothing(http, env, api_key, items):
    before = snapshot()
    keys = {"env": env.key, "api": api_key, "either": api_key}
    seen = set()
    for method, path, kwargs, kind in bad_requests(env.id, items):
        headers = {"Authorization": f"Bearer {keys[kind]}", **kwargs.pop("headers", {})}
        response = http.request(method, path, headers=headers, **kwargs)
        where = f"{method} {path[:120]} {str(kwargs)[:200]}"
        assert response.status_code in REFUSALS, f"{where} -> {response.status_code} {response.text[:300]}"
        body = response.json()
        assert body["type"] == "error" and body["error"]["message"], where
        seen.add(response.status_code)
        if response.status_code in (404, 409, 412):
            assert response.headers["x-should-retry"] == "false", where
    assert snapshot() == before
    assert {400, 404, 405, 409, 412, 413} <= seen


def test_messages_name_the_field(http, env, api_key, items):
    base = f"/v1/environments/{env.id}/work"
    auth = {"Authorization": f"Bearer {env.key}"}
    cases = [
        (http.get(f"{base}/poll", params={"block_ms": "0"}, headers=auth), "block_ms"),
        (http.get(f"{base}/poll", params={"reclaim_older_than_ms": "0"}, headers=auth), "reclaim_older_than_ms"),
        (http.get(base, params={"limit": "500"}, headers=auth), "limit"),
        (http.get(base, params={"page": "nope"}, headers=auth), "page"),
        (http.post(f"{base}/{items['active']}/heartbeat", headers=auth), "expected_last_heartbeat"),
        (http.post(f"{base}/{items['queued']}/stop", json={"force": "yes"}, headers=auth), "force"),
        (http.post(f"{base}/wörk/ack", headers=auth), "work_id"),
    ]
    for response, field in cases:
        assert response.status_code == 400
        assert field in response.json()["error"]["message"], response.text

    patch = http.post(
        f"{base}/{items['queued']}",
        json={"metadata": {"n": 1, "k" * 70: "v"}},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    error = patch.json()["error"]
    assert patch.status_code == 400 and error["details"]["error_code"] == "invalid_metadata"
    assert "'n'" in error["message"] and "longer than 64" in error["message"]


def test_metadata_patch_rules(http, env, api_key, items):
    path = f"/v1/environments/{env.id}/work/{items['stopped']}"
    auth = {"Authorization": f"Bearer {api_key}"}
    patched = http.post(path, json={"metadata": {"new": "1", "k": None}}, headers=auth)
    assert patched.status_code == 200 and patched.json()["metadata"] == {"new": "1"}  # allowed when stopped
    unchanged = http.post(path, json={}, headers=auth)
    assert unchanged.status_code == 200 and unchanged.json()["metadata"] == {"new": "1"}
    assert http.post(path, content=b"", headers=auth).json()["metadata"] == {"new": "1"}
    assert WorkItem.objects.get(public_id=items["stopped"]).metadata == {"new": "1"}


def test_huge_and_hostile_bodies_do_not_reach_the_database(http, env):
    path = f"/v1/environments/{env.id}/work/work_0000/stop"
    response = http.post(
        path, content=json.dumps({"force": True, "pad": "x" * 100_000}), headers={"Authorization": f"Bearer {env.key}"}
    )
    assert response.status_code == 413


def test_a_desired_ttl_too_large_for_a_float_is_a_400_not_a_500(http, env, items):
    # 10**309 is a valid JSON integer but overflows a float (issue 9, item 7).
    url = f"/v1/environments/{env.id}/work/{items['active']}/heartbeat"
    auth = {"Authorization": f"Bearer {env.key}", "Content-Type": "application/json"}
    for where, response in (
        (
            "body",
            http.post(
                url,
                headers=auth,
                content='{"expected_last_heartbeat": "NO_HEARTBEAT", "desired_ttl_seconds": 1' + "0" * 309 + "}",
            ),
        ),
        (
            "query",
            http.post(
                url,
                headers=auth,
                params={"expected_last_heartbeat": "NO_HEARTBEAT", "desired_ttl_seconds": "1" + "0" * 309},
            ),
        ),
    ):
        assert response.status_code == 400, f"{where}: {response.status_code} {response.text[:300]}"
        error = response.json()["error"]
        assert "desired_ttl_seconds" in error["message"] and len(error["message"]) < 300, where
