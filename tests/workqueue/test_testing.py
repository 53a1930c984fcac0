"""workqueue.testing: the helpers shipped for testing code that uses the queue."""

import pytest

from tests.testapp.models import Completion
from workqueue import testing
from workqueue.models import WorkItem


@pytest.mark.django_db
def test_drain_runs_handlers_inline_and_settles_like_a_worker():
    WorkItem.objects.enqueue_many([("test.record", f"k{i}") for i in range(3)] + [("test.fail", "bad")])
    ran = testing.drain(["test.record", "test.fail"])
    assert ran == 6  # three records, and three attempts of the failing item
    assert sorted(Completion.objects.values_list("key", flat=True)) == ["k0", "k1", "k2"]
    assert WorkItem.objects.filter(queue="test.record").succeeded().count() == 3
    bad = WorkItem.objects.get(key="bad")
    # test.fail retries with no delay until its 3 attempts are spent; the drain follows it there.
    assert (bad.state, bad.outcome, bad.attempts) == ("stopped", "failed", 3)
    assert "test.fail attempt 3" in bad.last_error
    assert testing.drain(["test.record"]) == 0


@pytest.mark.django_db
def test_assert_enqueued_finds_live_items_and_says_what_is_there_when_not():
    WorkItem.objects.enqueue("test.noop", "present")
    assert testing.assert_enqueued("test.noop", key="present").key == "present"
    with pytest.raises(AssertionError, match=r"nothing live on 'test\.noop' for 'absent'.*present"):
        testing.assert_enqueued("test.noop", key="absent")
