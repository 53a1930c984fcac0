"""Fixtures for the wire tests: environments with keys, an API key, SDK clients on a live server.

Tests that talk HTTP use pytest-django's ``live_server`` (a threaded WSGI server in this
process, one database connection per request thread), so they need
``@pytest.mark.django_db(transaction=True)``: what the test writes must be committed for the
server's connections to see it.
"""

from __future__ import annotations

import socket

import anthropic
import httpx
import pytest
from django.core.servers.basehttp import ThreadedWSGIServer

from tests.workqueue.wire.helpers import Env
from workqueue import listener
from workqueue.environments import create_api_key, create_environment
from workqueue.wire.wakeups import wakeups


@pytest.fixture(autouse=True, scope="session")
def _live_server_without_nagle():
    """Answer small keep-alive requests at once (TCP_NODELAY) instead of ~40 ms later.

    Django's test server writes a response's headers and body in separate sends; with Nagle's
    algorithm on, the body waits for the client's delayed ACK. The SDK keeps connections
    alive, so every call would pay that wait.
    """
    original = ThreadedWSGIServer.get_request

    def get_request(self):
        sock, address = original(self)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, address

    ThreadedWSGIServer.get_request = get_request
    yield
    ThreadedWSGIServer.get_request = original


@pytest.fixture(autouse=True)
def _stop_shared_listener():
    """A blocked poll starts the shared listener; stop it so the test database can be dropped."""
    yield
    wakeups().reset()
    listener.shared().stop()


def _new_env(name: str, kind: str) -> Env:
    environment, key = create_environment(name, kind)
    return Env(environment.id, key, kind)


@pytest.fixture
def env(db) -> Env:
    return _new_env("byoc", "self_hosted")


@pytest.fixture
def other_env(db) -> Env:
    return _new_env("byoc-2", "self_hosted")


@pytest.fixture
def cloud_env(db) -> Env:
    return _new_env("cloud", "cloud")


@pytest.fixture
def api_key(db) -> str:
    return create_api_key("control-plane")[1]


@pytest.fixture
def sdk(live_server):
    """Build SDK clients against the live server: ``sdk(key)``; closed at teardown."""
    made: list[anthropic.Anthropic] = []

    def make(key: str, **kwargs) -> anthropic.Anthropic:
        client = anthropic.Anthropic(base_url=live_server.url, auth_token=key, api_key=None, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def http(live_server):
    """A plain httpx client on the live server, for what the SDK will not send."""
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        yield client
