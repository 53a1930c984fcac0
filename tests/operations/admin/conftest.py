"""Fixtures for the operations admin tests."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client


@pytest.fixture
def admin_client(db):
    """A client signed in as the superuser ``boss``."""
    user = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client
