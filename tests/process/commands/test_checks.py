"""`reaper check`: each finding, against a real PostgreSQL, as the reaper role."""

from __future__ import annotations

from tests.support.checks import failed, findings_of
from tests.support.ops import (
    run_json,
)


def test_advisory_lock_fails_through_transaction_pooling(pgbouncer, capsys) -> None:
    through = pgbouncer("transaction")
    code, doc = run_json(
        capsys, "check", "--dsn", through, "--sweep", "router_leases", "--connect-timeout", "60s"
    )
    assert code == 1
    lock = findings_of(doc, check="advisory_lock")[0]
    assert lock["status"] == "fail"
    assert "transaction-pooling proxy" in lock["detail"]
    assert lock["fix"] == (
        "connect reaper to PostgreSQL directly, or through a pool in session mode with "
        "--session-pooler"
    )


def test_advisory_lock_passes_through_session_pooling(pgbouncer, capsys) -> None:
    through = pgbouncer("session")
    args = ["check", "--dsn", through, "--sweep", "router_leases", "--connect-timeout", "60s"]
    # A pooler is refused until the operator says it keeps sessions: nothing on the wire
    # tells a session pooler from a transaction pooler that happened to keep one.
    code, doc = run_json(capsys, *args)
    assert code == 1
    assert findings_of(doc, check="advisory_lock")[0]["status"] == "fail"
    code, doc = run_json(capsys, *args, "--session-pooler")
    assert [f[1] for f in failed(doc)] == ["role"]  # connected as a superuser
    assert findings_of(doc, check="advisory_lock")[0]["status"] == "pass"
