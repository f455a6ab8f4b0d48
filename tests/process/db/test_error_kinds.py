"""What a failure says about itself: a cancelled statement names its cause (statement timeout,
lock timeout, or a cancel request such as a shutdown's), a database error keeps its SQLSTATE
in the log line and in `run-once --json`, and an unexpected exception is logged as a bug,
with its traceback, counted as a failure, and the next run goes on.

Each cause is produced for real: pg_sleep past statement_timeout, a second connection holding
the table's lock, pg_cancel_backend() and the shutdown's own cancel.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support import run_reaper
from tests.support.daemon import seed_routers

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db


# -- the three causes of a cancelled statement ----------------------------------------------


# -- a sweep's failure: its kind and SQLSTATE, in the log line and the result ---------------


def test_run_once_json_keeps_the_sqlstate(dsn: str, conn: psycopg.Connection[Any]) -> None:
    seed_routers(conn, garbage=5, keep=1)
    conn.execute(f"ALTER DATABASE {conn.info.dbname} SET default_transaction_read_only = on")
    run = run_reaper(
        "run-once",
        "--json",
        "--dsn",
        dsn,
        "--sweep",
        "router_leases",
        "--max-eligible-fraction",
        "1",
    )
    assert run.code == 1, run.stderr
    (result,) = run.json()
    assert (result["outcome"], result["error_type"], result["sqlstate"]) == (
        "failure",
        "ReadOnlyDatabase",
        "25006",
    )
    (failed,) = [e for e in run.events() if e["event"] == "sweep_failed"]
    assert (failed["error_type"], failed["sqlstate"]) == ("ReadOnlyDatabase", "25006")
    assert "exception" not in failed


# -- a bug ----------------------------------------------------------------------------------
