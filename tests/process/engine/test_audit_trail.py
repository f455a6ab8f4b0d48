"""The audit trail as an operator sees it from the real ``reaper`` command: at
``--log-level debug`` each batch's ``batch_keys`` line on standard error names the rows it
deleted, the archive table holds them, and ``archive_file = "-"`` writes them as JSON lines on
standard output, apart from the logs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import run_reaper

pytestmark = pytest.mark.fresh_db

EVENTS = """
CREATE TABLE public.events (id bigint PRIMARY KEY, tenant text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX events_at_idx ON public.events (at);
INSERT INTO public.events
SELECT i, 'tenant-' || (i % 2),
       now() - CASE WHEN i % 3 = 0 THEN interval '29 days' ELSE interval '31 days' END
FROM generate_series(1, 50) AS i;
CREATE SCHEMA audit;
CREATE TABLE audit.events_archive (LIKE public.events,
                                   archived_at timestamptz NOT NULL DEFAULT now());
"""
GO = sorted(i for i in range(1, 51) if i % 3)

CONFIG = """
batch_size = 8
max_eligible_fraction = 1

[sweeps.events]
table = "public.events"
reason = "stale"
age = "at"
retention = "30d"
archive = "audit.events_archive"
archive_file = "-"
"""


def test_run_once_logs_each_batchs_keys_and_archives_its_rows(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    conn.execute(EVENTS)
    config = tmp_path / "reaper.toml"
    config.write_text(CONFIG)

    run = run_reaper(
        "--log-level",
        "debug",
        "run-once",
        "--config",
        str(config),
        "--sweep",
        "events",
        env={"REAPER_DSN": dsn},
    )

    assert run.code == 0, run.stderr
    events = run.events()
    keys = [e for e in events if e["event"] == "batch_keys"]
    assert len(keys) > 1
    assert sorted(k for e in keys for k in e["keys"]) == GO
    assert all(e["level"] == "debug" and e["key"] == "id" for e in keys)
    # Standard output: one JSON line per row deleted, then run-once's own report.
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["row"]["id"] for r in rows) == GO
    assert {r["sweep"] for r in rows} == {"events"}
    archived = sorted(r[0] for r in conn.execute("SELECT id FROM audit.events_archive"))
    assert archived == GO

    # At the default level no key is logged.
    conn.execute("INSERT INTO public.events VALUES (100, 't', now() - interval '40 days')")
    quiet = run_reaper(
        "run-once", "--config", str(config), "--sweep", "events", env={"REAPER_DSN": dsn}
    )
    assert quiet.code == 0, quiet.stderr
    assert not [e for e in quiet.events() if e["event"] == "batch_keys"]
    lines = [json.loads(line) for line in quiet.stdout.splitlines() if line.startswith("{")]
    assert [r["row"] for r in lines] == [{"id": 100, "tenant": "t", "at": lines[0]["row"]["at"]}]


@pytest.mark.parametrize(
    "archive",
    [
        "DROP TABLE audit.events_archive",
        "ALTER TABLE audit.events_archive DROP COLUMN tenant",
        "ALTER TABLE audit.events_archive ALTER COLUMN tenant TYPE varchar(20)",
    ],
    ids=["missing", "lacks a column", "another type"],
)
def test_run_once_refuses_an_archive_that_cannot_take_the_rows_before_any_sweep(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, archive: str
) -> None:
    conn.execute(EVENTS)
    conn.execute(archive)
    config = tmp_path / "reaper.toml"
    config.write_text(CONFIG.replace('archive_file = "-"\n', ""))

    run = run_reaper("run-once", "--config", str(config), env={"REAPER_DSN": dsn})

    assert run.code == 2, run.stderr
    line = run.stderr.strip()
    assert "\n" not in line and line.startswith("reaper: sweep events: archive table "), line
    assert conn.execute("SELECT count(*) FROM public.events").fetchone() == (50,)
    # A dry run archives nothing: it counts as it would without the archive.
    dry = run_reaper("run-once", "--dry-run", "--config", str(config), env={"REAPER_DSN": dsn})
    assert dry.code == 0, dry.stderr
