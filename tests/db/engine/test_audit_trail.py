"""What a sweep leaves for an auditor, on a real PostgreSQL: each batch's ``batch_keys`` debug
line names exactly the rows it deleted (by primary key, a declared key, or tuple id), and an
archive keeps exactly the rows deleted, in the statement that deletes them (a table) or
before the batch commits (JSON lines), also when a batch fails and is split; an archive
table is swept by its own declared sweep.

Every test declares tables of its own: a database of its own each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import sql

from reaper.commands import checks
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.db import Database
from reaper.engine.archive import MAX_KEYS_CHARS
from reaper.engine.run import run_sweep
from reaper.vocab import CheckName, CheckStatus
from tests.support import NOW, TEST_DEFAULTS, login_as, sweeps_of

pytestmark = pytest.mark.fresh_db

# 60 events, ids 1..60: every third stays (a day younger than the 30-day retention), the
# others go (a day older); tenants alternate, so (tenant, id) is a key too.
ROWS = 60
EVENTS = """
CREATE TABLE public.events (
    id      bigint NOT NULL,
    tenant  text NOT NULL,
    payload jsonb,
    at      timestamptz NOT NULL
    {key}
);
CREATE INDEX events_at_idx ON public.events (at)
"""
SEED = """
INSERT INTO public.events
SELECT i, 'tenant-' || (i %% 2), jsonb_build_object('n', i, 'tag', 'x' || i),
       %(now)s::timestamptz - CASE WHEN i %% 3 = 0 THEN interval '29 days'
                                   ELSE interval '31 days' END
FROM generate_series(1, %(rows)s) AS i
"""
GO = {i for i in range(1, ROWS + 1) if i % 3}
STAY = {i for i in range(1, ROWS + 1) if not i % 3}
# What an archive or a line keeps of each row: every column of events.
COLUMNS = "id, tenant, payload::text, at"


def events_table(
    conn: psycopg.Connection[Any], key: str = ", PRIMARY KEY (id)", rows: int = ROWS
) -> None:
    conn.execute(EVENTS.format(key=key))  # type: ignore[arg-type]
    conn.execute(SEED, {"now": NOW, "rows": rows})  # type: ignore[arg-type]


def settings_for(dsn: str, batch_size: int = 7, strategy: str = "auto", **sweep: Any) -> Settings:
    return build_settings(
        {"dsn": dsn, **TEST_DEFAULTS, "batch_size": str(batch_size), "strategy": strategy},
        {
            "sweeps": {
                "events": {
                    "table": "public.events",
                    "reason": "stale",
                    "age": "at",
                    "retention": "30d",
                    **sweep,
                }
            }
        },
    )


def ids(conn: psycopg.Connection[Any], table: str) -> set[int]:
    return {r[0] for r in conn.execute(f"SELECT id FROM {table}")}


def rows_of(conn: psycopg.Connection[Any], table: str, where: str = "true") -> set[tuple[Any, ...]]:
    return {tuple(r) for r in conn.execute(f"SELECT {COLUMNS} FROM {table} WHERE {where}")}


@pytest.fixture
def debug(caplog: pytest.LogCaptureFixture) -> Iterator[list[dict[str, Any]]]:
    """The runner's log at debug level (what ``--log-level debug`` sets), captured."""
    caplog.set_level(logging.DEBUG, logger="reaper.runner")
    with structlog.testing.capture_logs() as logs:
        yield logs


def batch_keys(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "batch_keys"]


def sweep(database: Database, settings: Settings, name: str = "events") -> Any:
    return run_sweep(database, sweeps_of(settings)[name], engine_options(settings), now=NOW)


# --- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["heap", "index"])
def test_each_batch_logs_exactly_the_keys_it_deleted(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    debug: list[dict[str, Any]],
    strategy: str,
) -> None:
    events_table(conn)
    result = sweep(database, settings_for(dsn, strategy=strategy))

    assert result.outcome == "success" and result.rows == len(GO), result
    assert ids(conn, "public.events") == STAY
    lines = batch_keys(debug)
    batches = [e for e in debug if e["event"] == "batch_deleted" and e["rows"]]
    # One line per batch that deleted rows, each naming its own rows: together, each row
    # deleted exactly once, and none kept.
    assert len(lines) == len(batches) > 1
    assert [len(e["keys"]) for e in lines] == [e["rows"] for e in batches]
    logged = [k for e in lines for k in e["keys"]]
    assert sorted(logged) == sorted(GO)
    for e in lines:
        assert e["sweep"] == "events" and e["table"] == "events" and e["key"] == "id"
        assert e["keys_omitted"] == 0 and e["log_level"] == "debug"
        # Keys, never rows: no other column's value is in the line.
        assert "tenant-" not in json.dumps(e, default=str)


@pytest.mark.parametrize(
    ("key", "declared", "shown", "expect"),
    [
        (", PRIMARY KEY (tenant, id)", None, ["tenant", "id"], lambda i: [f"tenant-{i % 2}", i]),
        ("", ["id"], "id", lambda i: i),
        (
            ", PRIMARY KEY (id)",
            ["tenant", "id"],
            ["tenant", "id"],
            lambda i: [f"tenant-{i % 2}", i],
        ),
    ],
    ids=["composite primary key", "declared key, no primary key", "declared over primary"],
)
def test_keys_are_the_primary_key_or_the_declared_one(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    debug: list[dict[str, Any]],
    key: str,
    declared: list[str] | None,
    shown: Any,
    expect: Callable[[int], Any],
) -> None:
    events_table(conn, key)
    extra = {"key": declared} if declared else {}
    result = sweep(database, settings_for(dsn, **extra))

    assert result.rows == len(GO)
    lines = batch_keys(debug)
    assert {json.dumps(e["key"]) for e in lines} == {json.dumps(shown)}
    logged = [k for e in lines for k in e["keys"]]
    assert sorted(map(json.dumps, logged)) == sorted(json.dumps(expect(i)) for i in GO)


def test_a_table_without_a_key_logs_tuple_ids(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    debug: list[dict[str, Any]],
) -> None:
    events_table(conn, "")
    tids = {str(r[0]) for r in conn.execute("SELECT ctid FROM public.events WHERE id % 3 <> 0")}
    result = sweep(database, settings_for(dsn))

    assert result.rows == len(GO)
    lines = batch_keys(debug)
    assert {e["key"] for e in lines} == {"ctid"}
    logged = [k for e in lines for k in e["keys"]]
    assert sorted(logged) == sorted(tids)


def test_a_batch_of_many_keys_logs_at_most_its_cap_and_counts_the_rest(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    debug: list[dict[str, Any]],
) -> None:
    # Long text keys: 3,000 garbage rows in one batch hold far more than the cap.
    events_table(conn, ", PRIMARY KEY (tenant, id)", rows=4500)
    conn.execute("UPDATE public.events SET tenant = repeat('t', 40) || id")
    result = sweep(database, settings_for(dsn, batch_size=10_000, strategy="index"))

    assert result.rows == 3000
    lines = batch_keys(debug)
    assert len(lines) == 1
    (line,) = lines
    assert 0 < len(line["keys"]) < 3000
    assert len(line["keys"]) + line["keys_omitted"] == 3000
    assert len(json.dumps(line["keys"])) <= MAX_KEYS_CHARS


@pytest.mark.parametrize("key", [["payload"], ["payload", "id"]], ids=["one column", "two"])
def test_a_key_nested_thousands_deep_is_logged_cut_and_the_sweep_goes_on(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    debug: list[dict[str, Any]],
    key: list[str],
) -> None:
    """A jsonb key 5,000 levels deep, past Python's JSON parser: its rows go, its batch's
    keys line shows it as its JSON text, cut, and every other key as it is."""
    events_table(conn, "")
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    conn.execute("UPDATE public.events SET payload = %s::jsonb WHERE id = 1", (deep,))
    result = sweep(database, settings_for(dsn, batch_size=100, strategy="index", key=key))

    assert result.outcome == "success" and result.rows == len(GO), result.error
    assert ids(conn, "public.events") == STAY
    (line,) = batch_keys(debug)
    logged = [k if len(key) == 1 else k[0] for k in line["keys"]]
    cut = [k for k in logged if isinstance(k, str)]
    assert len(cut) == 1 and cut[0].startswith('{"a": {"a": ') and cut[0].endswith("...")
    assert len(cut[0]) <= MAX_KEYS_CHARS
    assert sorted(k["n"] for k in logged if isinstance(k, dict)) == sorted(GO - {1})


def test_at_info_level_no_keys_are_returned_or_logged(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    caplog: pytest.LogCaptureFixture,
) -> None:
    events_table(conn)
    caplog.set_level(logging.INFO, logger="reaper.runner")
    with structlog.testing.capture_logs() as logs:
        result = sweep(database, settings_for(dsn))
    assert result.rows == len(GO)
    assert batch_keys(logs) == []


# --- archive table ------------------------------------------------------------------------

ARCHIVES = {
    "like": "CREATE TABLE audit.events_archive (LIKE public.events, "
    "archived_at timestamptz NOT NULL DEFAULT now())",
    # Its own column order, its own columns first, and an identity id of its own: columns
    # are matched by name, and the row's own id is kept.
    "reordered": "CREATE TABLE audit.events_archive (archived_at timestamptz NOT NULL DEFAULT "
    "now(), note text, at timestamptz, payload jsonb, tenant text, "
    "id bigint GENERATED ALWAYS AS IDENTITY)",
}


def make_archive(conn: psycopg.Connection[Any], kind: str = "like") -> None:
    conn.execute("CREATE SCHEMA audit")
    conn.execute(ARCHIVES[kind])


@pytest.mark.parametrize("strategy", ["heap", "index"])
@pytest.mark.parametrize("kind", list(ARCHIVES))
def test_the_archive_table_holds_exactly_the_rows_deleted(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    strategy: str,
    kind: str,
) -> None:
    events_table(conn)
    seeded = rows_of(conn, "public.events")
    make_archive(conn, kind)
    result = sweep(database, settings_for(dsn, strategy=strategy, archive="audit.events_archive"))

    assert result.outcome == "success" and result.rows == len(GO)
    assert ids(conn, "public.events") == STAY
    assert rows_of(conn, "audit.events_archive") == {r for r in seeded if r[0] in GO}
    # Each row once: no batch archived a row twice (a range rolled back, a split).
    count = conn.execute("SELECT count(*) FROM audit.events_archive").fetchone()
    assert count is not None and count[0] == len(GO)
    assert result.partitions == []


def test_workers_of_a_parallel_walk_archive_each_row_they_delete_once(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
) -> None:
    # Many ranges, three connections inserting into one archive table: however they meet
    # (a wait for the archive's extension ends the parallel part), the run succeeds, and the
    # archive holds each deleted row once.
    events_table(conn, rows=30_000)
    conn.execute("ANALYZE public.events")
    make_archive(conn)
    settings = settings_for(dsn, batch_size=300, strategy="heap", archive="audit.events_archive")
    settings = settings.replace(parallel=3)
    result = sweep(database, settings)
    assert result.outcome == "success", result.error
    assert result.rows == 20_000 == 30_000 - len(ids(conn, "public.events"))
    row = conn.execute("SELECT count(*), count(DISTINCT id) FROM audit.events_archive").fetchone()
    assert row == (20_000, 20_000)


HELD = (4, 11)
BLOCKERS = {
    # A RESTRICT reference: the DELETE of the held rows fails with SQLSTATE 23503.
    "foreign key": "CREATE TABLE public.event_holds (event_id bigint NOT NULL "
    "REFERENCES public.events (id));"
    "INSERT INTO public.event_holds VALUES (4), (11)",
    # A trigger that refuses them.
    "trigger": "CREATE FUNCTION public.keep_held() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN IF OLD.id IN (4, 11) THEN RAISE EXCEPTION 'held %', OLD.id; END IF; "
    "RETURN OLD; END $$;"
    "CREATE TRIGGER keep_held BEFORE DELETE ON public.events FOR EACH ROW "
    "EXECUTE FUNCTION public.keep_held()",
}


@pytest.mark.parametrize("strategy", ["heap", "index"])
@pytest.mark.parametrize("blocker", list(BLOCKERS))
def test_a_split_batch_archives_exactly_the_rows_it_deleted(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    strategy: str,
    blocker: str,
    debug: list[dict[str, Any]],
) -> None:
    events_table(conn)
    seeded = rows_of(conn, "public.events")
    make_archive(conn)
    conn.execute(BLOCKERS[blocker])
    result = sweep(database, settings_for(dsn, strategy=strategy, archive="audit.events_archive"))

    gone = GO - set(HELD)
    assert result.outcome == "success" and result.rows == len(gone)
    assert sum(result.skipped.values()) == len(HELD)
    assert ids(conn, "public.events") == STAY | set(HELD)
    assert rows_of(conn, "audit.events_archive") == {r for r in seeded if r[0] in gone}
    count = conn.execute("SELECT count(*) FROM audit.events_archive").fetchone()
    assert count is not None and count[0] == len(gone)
    # The keys logged are the rows deleted, the split batches' and single rows' included.
    assert sorted(k for e in batch_keys(debug) for k in e["keys"]) == sorted(gone)
    assert any(e["event"] == "batch_split" for e in debug)


@pytest.mark.parametrize(
    ("archive", "error"),
    [
        (None, "archive table audit.events_archive does not exist; create it"),
        (
            "CREATE TABLE audit.events_archive (id bigint, tenant text, at timestamptz)",
            "archive table audit.events_archive has no column payload of table events; add it",
        ),
        (
            "CREATE TABLE audit.events_archive (id bigint, tenant text, payload text, "
            "at timestamptz)",
            "archive table audit.events_archive column payload is text, not jsonb",
        ),
        (
            "CREATE TABLE audit.events_archive (id bigint, tenant text, payload jsonb, "
            "at timestamptz GENERATED ALWAYS AS ('epoch'::timestamptz) STORED)",
            "archive table audit.events_archive column at is generated",
        ),
    ],
    ids=["missing", "lacks a column", "another type", "generated column"],
)
def test_an_archive_that_cannot_take_the_rows_stops_the_run_before_any_delete(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    archive: str | None,
    error: str,
) -> None:
    events_table(conn)
    conn.execute("CREATE SCHEMA audit")
    if archive:
        conn.execute(archive)
    settings = settings_for(dsn, archive="audit.events_archive")
    result = sweep(database, settings)

    # A missing table is a failure (ObjectMissing); one that cannot take the rows, a refusal.
    assert result.outcome == ("failure" if archive is None else "refused")
    assert result.rows == 0
    assert result.error is not None and error in result.error, result.error
    assert "\n" not in result.error
    assert ids(conn, "public.events") == GO | STAY
    found = [
        f
        for f in checks.run_checks(database, [sweeps_of(settings)["events"]], settings, now=NOW)
        if f.check == CheckName.COLUMNS and f.subject == "audit.events_archive"
    ]
    assert [f.status for f in found] == [CheckStatus.FAIL] and error in found[0].detail


def test_without_insert_on_the_archive_nothing_is_deleted_and_check_names_the_grant(
    dsn: str,
    conn: psycopg.Connection[Any],
) -> None:
    events_table(conn)
    make_archive(conn)
    role = f"reaper_archive_{conn.info.backend_pid}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        conn.execute(
            sql.SQL(
                "GRANT USAGE ON SCHEMA audit TO {r}; GRANT SELECT ON audit.events_archive TO {r}; "
                "GRANT SELECT, DELETE ON public.events TO {r}"
            ).format(r=sql.Identifier(role))
        )
        settings = settings_for(login_as(dsn, role), archive="audit.events_archive")
        with Database(connection_settings(settings)) as db:
            result = run_sweep(db, sweeps_of(settings)["events"], engine_options(settings), now=NOW)
            found = checks.run_checks(db, [sweeps_of(settings)["events"]], settings, now=NOW)
        assert result.outcome == "failure" and result.rows == 0
        assert result.error is not None
        assert "lacks INSERT on table audit.events_archive" in result.error, result.error
        assert ids(conn, "public.events") == GO | STAY
        failed = [f for f in found if f.failed and f.check == CheckName.PRIVILEGES]
        assert [(f.subject, f.fix) for f in failed] == [
            ("INSERT on audit.events_archive", f"GRANT INSERT ON audit.events_archive TO {role}")
        ]
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role)))


@pytest.mark.parametrize("age", ["archived_at", "at"])
def test_an_archive_table_is_swept_by_its_own_declared_sweep(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    age: str,
) -> None:
    events_table(conn)
    make_archive(conn)
    archive_sweep = {
        "table": "audit.events_archive",
        "reason": "archived",
        "age": age,
        "retention": "90d",
    }
    settings = build_settings(
        {"dsn": dsn, **TEST_DEFAULTS, "batch_size": "7"},
        {
            "sweeps": {
                "events": {
                    "table": "public.events",
                    "reason": "stale",
                    "age": "at",
                    "retention": "30d",
                    "archive": "audit.events_archive",
                },
                "events_archive": archive_sweep,
            }
        },
    )
    assert sweep(database, settings).rows == len(GO)
    # Some archived rows are past the archive's own retention of 90 days, by the column it
    # dates them with; the others are not.
    old = {i for i in GO if i % 2}
    for parity, days in ((1, 91), (0, 89)):
        conn.execute(
            sql.SQL("UPDATE audit.events_archive SET {} = %(t)s WHERE id %% 2 = %(p)s").format(
                sql.Identifier(age)
            ),
            {"t": NOW - timedelta(days=days), "p": parity},
        )

    result = sweep(database, settings, "events_archive")

    assert result.outcome == "success" and result.rows == len(old)
    assert ids(conn, "audit.events_archive") == GO - old


# --- JSON lines ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["heap", "index"])
def test_the_archive_file_holds_one_line_per_row_deleted(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    strategy: str,
    tmp_path: Path,
) -> None:
    events_table(conn)
    conn.execute(BLOCKERS["foreign key"])
    seeded = {r[0]: r for r in conn.execute("SELECT row_to_json(e)::text FROM public.events e")}
    path = tmp_path / "events.jsonl"
    result = sweep(database, settings_for(dsn, strategy=strategy, archive_file=str(path)))

    gone = GO - set(HELD)
    assert result.outcome == "success" and result.rows == len(gone)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(line["row"]["id"] for line in lines) == sorted(gone)
    for line in lines:
        assert line["sweep"] == "events" and line["table"] == "public.events"
        assert line["written_at"].endswith("+00:00")
    expected = {json.loads(t)["id"]: json.loads(t) for t in seeded}
    assert all(line["row"] == expected[line["row"]["id"]] for line in lines)


def test_rows_go_to_standard_output_as_json_lines(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    capsys: pytest.CaptureFixture[str],
) -> None:
    events_table(conn)
    result = sweep(database, settings_for(dsn, archive_file="-"))
    # In-process, an unconfigured structlog prints to standard output too; reaper's own
    # configuration logs to standard error (tests/process).
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert result.rows == len(GO)
    assert sorted(json.loads(line)["row"]["id"] for line in out) == sorted(GO)


def test_a_line_that_cannot_be_written_rolls_its_batch_back(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    tmp_path: Path,
) -> None:
    events_table(conn)
    path = tmp_path / "gone" / "events.jsonl"  # its directory does not exist
    result = sweep(database, settings_for(dsn, archive_file=str(path)))

    assert result.outcome == "failure" and result.rows == 0
    assert result.error is not None and result.error.startswith(f"archive file {path}: ")
    assert "nothing of it deleted" in result.error
    assert ids(conn, "public.events") == GO | STAY
