"""Every kind of relation a sweep can name, on a real PostgreSQL, through the CLI.

A batch deletes exactly the rows it selected: each heap the declared table covers (itself,
its inheritance children at any depth, its partitions and sub-partitions, a DEFAULT
partition) is walked on its own, ``FROM ONLY`` that heap, so a tuple id never reaches a row
of another heap. A dry run counts what a real run then deletes, for every strategy. A
relation with no heap reaper can name rows in (a view, a materialized view, a foreign table,
or a table that covers one) is refused before anything runs: exit 2, one line naming the
table and why; ``reaper check`` reports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.relation_kinds import (
    FRESH,
    OLD,
    ages,
    assert_refused,
    reaper,
    seed,
    write_config,
)

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db

STRATEGIES = pytest.mark.parametrize("strategy", ["heap", "index", "auto"])


def run_once(
    capsys: pytest.CaptureFixture[str], dsn: str, config: Path, *extra: str
) -> tuple[int, dict[str, Any], str]:
    code, out, err = reaper(
        capsys,
        "run-once",
        "--config",
        str(config),
        "--dsn",
        dsn,
        "--sweep",
        "events",
        "--json",
        *extra,
    )
    results = {r["sweep"]: r for r in json.loads(out)} if out.strip() else {}
    return code, results.get("events", {}), err


def dry_then_real(
    capsys: pytest.CaptureFixture[str], dsn: str, config: Path, tmp_path: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    code, dry, err = run_once(capsys, dsn, config, "--dry-run")
    assert code == 0, err
    metrics_file = tmp_path / "reaper.prom"
    code, real, err = run_once(capsys, dsn, config, "--metrics-file", str(metrics_file))
    assert code == 0, err
    deleted = {
        s.labels["table"]: s.value
        for family in text_string_to_metric_families(metrics_file.read_text())
        for s in family.samples
        if s.name == "reaper_deleted_rows_total" and s.labels["reason"] == "old"
    }
    # The metrics name the declared table, whatever heaps the rows were in.
    assert deleted == {"events": real["rows"]}
    return dry, real


@STRATEGIES
def test_an_inheritance_parent_deletes_only_the_old_child_rows(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    strategy: str,
) -> None:
    # The tuple ids of the old rows of one child are the tuple ids of the fresh rows of the
    # other: a DELETE ... WHERE ctid = ANY(...) on the parent would delete both.
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE TABLE events_old () INHERITS (events);"
        "CREATE TABLE events_new () INHERITS (events);"
    )
    seed(conn, "events_old", 100, 0)
    seed(conn, "events_new", 0, 100)
    conn.execute("ANALYZE events_old; ANALYZE events_new")
    dry, real = dry_then_real(capsys, dsn, write_config(tmp_path, "events", strategy), tmp_path)
    assert dry["rows"] == real["rows"] == 100
    assert ages(conn, "events_old") == (0, 0)
    assert ages(conn, "events_new") == (0, 100)


@STRATEGIES
def test_inheritance_at_depth_two_and_the_parents_own_rows(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    strategy: str,
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE TABLE events_child (extra text) INHERITS (events);"
        "CREATE TABLE events_grandchild () INHERITS (events_child);"
    )
    seed(conn, "events", 40, 7)
    seed(conn, "events_child", 0, 50)
    seed(conn, "events_grandchild", 90, 11)
    dry, real = dry_then_real(capsys, dsn, write_config(tmp_path, "events", strategy), tmp_path)
    assert dry["rows"] == real["rows"] == 130
    assert ages(conn, "events") == (0, 7)
    assert ages(conn, "events_child") == (0, 50)
    assert ages(conn, "events_grandchild") == (0, 11)


@STRATEGIES
def test_a_partitioned_table_with_sub_partitions(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    strategy: str,
) -> None:
    conn.execute(
        """
        CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL) PARTITION BY LIST (id);
        CREATE TABLE events_even PARTITION OF events FOR VALUES IN (0) ;
        CREATE TABLE events_odd PARTITION OF events FOR VALUES IN (1)
            PARTITION BY RANGE (logged_at);
        CREATE TABLE events_odd_a PARTITION OF events_odd
            FOR VALUES FROM ('2000-01-01') TO ('2200-01-01');
        """
    )
    seed(conn, "events_even", 0, 0)
    conn.execute(
        f"INSERT INTO events SELECT g % 2, {OLD} FROM generate_series(1, 300) g;"
        f"INSERT INTO events SELECT g % 2, {FRESH} FROM generate_series(1, 80) g;"
    )
    dry, real = dry_then_real(capsys, dsn, write_config(tmp_path, "events", strategy), tmp_path)
    assert dry["rows"] == real["rows"] == 300
    assert ages(conn, "events_even") == (0, 40)
    assert ages(conn, "events_odd_a") == (0, 40)


@STRATEGIES
def test_a_partitioned_table_with_a_default_partition(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    strategy: str,
) -> None:
    conn.execute(
        """
        CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL)
            PARTITION BY RANGE (id);
        CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (100);
        CREATE TABLE events_rest PARTITION OF events DEFAULT;
        """
    )
    conn.execute(
        f"INSERT INTO events SELECT g, {OLD} FROM generate_series(1, 250) g;"
        f"INSERT INTO events SELECT g, {FRESH} FROM generate_series(1, 250) g;"
    )
    dry, real = dry_then_real(capsys, dsn, write_config(tmp_path, "events", strategy), tmp_path)
    assert dry["rows"] == real["rows"] == 250
    assert ages(conn, "events_low") == (0, 99)
    assert ages(conn, "events_rest") == (0, 151)


def test_a_materialized_view_is_refused(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn.execute("CREATE TABLE events_base (id bigint, logged_at timestamptz NOT NULL)")
    seed(conn, "events_base", 10, 10)
    conn.execute("CREATE MATERIALIZED VIEW events AS SELECT * FROM events_base")
    assert_refused(
        capsys, dsn, write_config(tmp_path, "events"), "events", "is a materialized view"
    )
    assert ages(conn, "events") == (10, 10)


def _foreign_table(conn: psycopg.Connection[Any], name: str, tmp_path: Path) -> None:
    """A file_fdw foreign table ``name`` (logged_at timestamptz), or skip."""
    row = conn.execute(
        "SELECT count(*) FROM pg_available_extensions WHERE name = 'file_fdw'"
    ).fetchone()
    if not row or not row[0]:
        pytest.skip("file_fdw is not installed (postgresql-contrib)")
    data = tmp_path / "events.csv"
    data.write_text("1,2000-01-01 00:00:00+00\n")
    data.chmod(0o644)
    tmp_path.chmod(0o755)
    conn.execute(
        "CREATE EXTENSION IF NOT EXISTS file_fdw;"
        "CREATE SERVER IF NOT EXISTS files FOREIGN DATA WRAPPER file_fdw;"
    )
    conn.execute(
        f"CREATE FOREIGN TABLE {name} (id bigint, logged_at timestamptz NOT NULL)"
        f" SERVER files OPTIONS (filename '{data}', format 'csv')"
    )


def test_a_foreign_table_is_refused(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _foreign_table(conn, "events", tmp_path)
    assert_refused(capsys, dsn, write_config(tmp_path, "events"), "events", "is a foreign table")


def test_a_partitioned_table_with_a_foreign_partition_is_refused(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL)"
        " PARTITION BY RANGE (id);"
        "CREATE TABLE events_local PARTITION OF events FOR VALUES FROM (0) TO (100);"
    )
    _foreign_table(conn, "events_remote", tmp_path)
    conn.execute("ALTER TABLE events ATTACH PARTITION events_remote FOR VALUES FROM (100) TO (200)")
    seed(conn, "events_local", 10, 10)
    assert_refused(
        capsys,
        dsn,
        write_config(tmp_path, "events"),
        "events",
        "covers public.events_remote, which is a foreign table",
    )
    assert ages(conn, "events_local") == (10, 10)


@pytest.mark.parametrize(
    "rule",
    [
        # Rewritten into a delete of another table: the batch's rows stay, others go.
        "DO INSTEAD DELETE FROM victim WHERE victim.id = old.id",
        # Kept, plus a delete of another table that the predicate never saw.
        "DO ALSO DELETE FROM victim WHERE victim.id = old.id OR true",
        # Rewritten into nothing: the run would report rows it never deleted.
        "DO INSTEAD NOTHING",
    ],
)
def test_a_table_with_a_delete_rule_is_refused(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rule: str,
) -> None:
    conn.execute(
        "CREATE TABLE victim (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        f"CREATE RULE events_delete AS ON DELETE TO events {rule};"
    )
    seed(conn, "victim", 0, 10)
    seed(conn, "events", 10, 10)
    assert_refused(capsys, dsn, write_config(tmp_path, "events"), "events", "has a rule ON DELETE")
    assert ages(conn, "events") == (10, 10)
    assert ages(conn, "victim") == (0, 10)


def test_an_inheritance_child_with_a_delete_rule_is_refused(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn.execute(
        "CREATE TABLE victim (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE TABLE events_a () INHERITS (events);"
        "CREATE RULE events_a_delete AS ON DELETE TO events_a"
        " DO INSTEAD DELETE FROM victim WHERE victim.id = old.id;"
    )
    seed(conn, "victim", 0, 10)
    seed(conn, "events_a", 10, 10)
    assert_refused(
        capsys,
        dsn,
        write_config(tmp_path, "events"),
        "events",
        "covers public.events_a, which has a rule ON DELETE",
    )
    assert ages(conn, "events_a") == (10, 10)
    assert ages(conn, "victim") == (0, 10)
