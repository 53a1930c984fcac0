"""``outcome_of``: a handler's ending -> what happens to its item. Pure: no database here.

The process tests (test_worker_process, test_worker_hardening) check the same endings end to
end; these pin the table itself, one row per test.
"""

from __future__ import annotations

import pytest
from django.db.utils import InterfaceError, OperationalError

from workqueue.exceptions import LeaseLost, Permanent, Retry
from workqueue.worker import Action, failure_of, outcome_of
from workqueue.worker.outcome import LOST_CONNECTION, lost_connection_error


def raised(exc: BaseException) -> BaseException:
    """``exc`` with a traceback, as a handler's exception has one."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_return_completes():
    outcome = outcome_of(None)
    assert outcome.action is Action.COMPLETE
    assert (outcome.error, outcome.delay, outcome.permanent, outcome.unexpected) == ("", None, False, False)


def test_retry_retries_with_its_delay_and_message():
    outcome = outcome_of(Retry("rate limited", delay=7.5))
    assert outcome.action is Action.RETRY
    assert (outcome.error, outcome.delay, outcome.permanent, outcome.unexpected) == ("rate limited", 7.5, False, False)


def test_retry_without_a_delay_leaves_the_backoff_to_the_queue():
    outcome = outcome_of(Retry())
    assert outcome.action is Action.RETRY and outcome.delay is None and outcome.error == "retry requested"


def test_permanent_fails_now_naming_the_class():
    outcome = outcome_of(Permanent("bad input"))
    assert outcome.action is Action.FAIL
    assert (outcome.error, outcome.delay, outcome.permanent, outcome.unexpected) == (
        "Permanent: bad input",
        None,
        True,
        False,
    )


def test_a_subclass_of_permanent_is_named_by_its_own_class():
    class BadPayload(Permanent):
        pass

    outcome = outcome_of(BadPayload("no 'to'"))
    assert outcome.action is Action.FAIL and outcome.error == "BadPayload: no 'to'"


def test_lease_lost_leaves_the_item_alone():
    outcome = outcome_of(LeaseLost())
    assert outcome.action is Action.LOST
    assert (outcome.error, outcome.permanent, outcome.unexpected) == ("", False, False)


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_database_error_on_a_usable_connection_is_the_handlers_failure(error):
    outcome = outcome_of(raised(error('relation "nope" does not exist')))
    assert outcome.action is Action.RETRY and outcome.unexpected and not outcome.permanent
    assert outcome.error.startswith(f'django.db.utils.{error.__name__}: relation "nope" does not exist\n')


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_database_error_on_a_dead_connection_releases_the_item(error):
    outcome = outcome_of(raised(error("server closed the connection unexpectedly\n")), connection_usable=False)
    assert outcome.action is Action.RELEASE and not outcome.permanent
    assert outcome.error == f"{error.__name__}: server closed the connection unexpectedly"


def test_connection_usable_matters_only_for_database_errors():
    assert outcome_of(Retry("x"), connection_usable=False).action is Action.RETRY
    assert outcome_of(Permanent("x"), connection_usable=False).action is Action.FAIL
    assert outcome_of(LeaseLost(), connection_usable=False).action is Action.LOST
    assert outcome_of(None, connection_usable=False).action is Action.COMPLETE
    assert outcome_of(raised(ValueError("x")), connection_usable=False).action is Action.RETRY


@pytest.mark.parametrize("exc", [ValueError("boom"), KeyboardInterrupt(), SystemExit(3), GeneratorExit()])
def test_anything_else_retries_with_its_class_and_frames(exc):
    outcome = outcome_of(raised(exc))
    assert outcome.action is Action.RETRY and outcome.unexpected and outcome.delay is None
    cls = type(exc)
    assert outcome.error.startswith(f"{cls.__module__}.{cls.__qualname__}: {exc}\n")
    assert "Traceback" in outcome.error and "in raised" in outcome.error


def test_a_huge_message_is_bounded():
    outcome = outcome_of(raised(ValueError("x" * 100_000)))
    assert len(outcome.error) == 8192


def test_failure_of_is_the_table_as_a_fail_call():
    assert failure_of(Retry("later", delay=2)) == ("later", 2, False)
    assert failure_of(Permanent("no")) == ("Permanent: no", None, True)
    error, delay, permanent = failure_of(raised(RuntimeError("oops")))
    assert error.startswith("builtins.RuntimeError: oops\n") and delay is None and permanent is False


def test_a_connection_loss_refunds_until_the_limit_then_charges():
    losses, error, refund = lost_connection_error(0, "OperationalError: gone", 2)
    assert (losses, refund) == (1, True)
    assert error == f"{LOST_CONNECTION} (1 in a row; released without charging the attempt): OperationalError: gone"
    losses, error, refund = lost_connection_error(1, "OperationalError: gone", 2)
    assert (losses, refund) == (2, True)
    losses, error, refund = lost_connection_error(2, "OperationalError: gone", 2)
    assert (losses, refund) == (3, False)
    assert error == f"{LOST_CONNECTION} (3 in a row; the attempt is charged): OperationalError: gone"
