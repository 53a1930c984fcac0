"""A module with an effect at import (tests/operations/test_schedule_targets.py): a schedule's
task path must never import what is not a registered task."""

IMPORTED = True
not_a_task = print
