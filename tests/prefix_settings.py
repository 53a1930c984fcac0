"""tests.settings with OPERATIONS["TABLE_PREFIX"] = "ddb": the operations table is ddb_operations.

Only for the processes of tests/operations/test_table_prefix.py, on a database of their own that
they migrate themselves (the model's table name is read once, at import).
"""

from tests.settings import *  # noqa: F403
from tests.settings import OPERATIONS

OPERATIONS = {**OPERATIONS, "TABLE_PREFIX": "ddb"}
