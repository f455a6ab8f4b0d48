"""Rows that cannot be deleted: what isolating them costs, in the first run and the next.

    .venv/bin/python bench/held_rows.py [--rows 10000] [--held 200] [--strategy auto]

A table of ``--rows`` stale rows (and a tenth as many live ones), of which ``--held`` are
kept by a trigger that raises (a legal hold), spread evenly through the table. One process
(one Sweeper, as the daemon keeps) runs the sweep twice; for each run it prints the seconds,
the rows deleted and the failed statements (each failed batch and each failed one-row
delete: the ``batch_split`` and ``row_skipped`` lines of the run's log). The server:
``REAPER_BENCH_DSN``, else ``REAPER_TEST_DSN``, else an embedded one. A figure to read, not a
pass/fail.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import by_name, configured_sweeps
from reaper.db import Database
from reaper.dev import devserver
from reaper.engine.run import Sweeper


def seed(dsn: str, rows: int, held: int) -> None:
    every = max(1, rows // max(held, 1))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE events (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL,"
            " hold boolean NOT NULL DEFAULT false);"
            "CREATE INDEX ON events (logged_at);"
        )
        conn.execute(
            "INSERT INTO events SELECT g, now() - interval '60 days', g %% %s = 0"
            " FROM generate_series(1, %s::bigint) g",
            (every, rows),
        )
        conn.execute(
            "INSERT INTO events SELECT g, now(), false"
            " FROM generate_series(%s::bigint, %s::bigint) g",
            (rows + 1, rows + rows // 10),
        )
        conn.execute(
            "CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN IF OLD.hold THEN RAISE EXCEPTION 'legal hold on %', OLD.id; END IF;"
            " RETURN OLD; END $$;"
            "CREATE TRIGGER hold BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION hold();"
        )
        conn.execute("VACUUM ANALYZE events")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--held", type=int, default=200)
    parser.add_argument("--strategy", default="auto", choices=["auto", "heap", "index"])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    env = "REAPER_BENCH_DSN" if os.environ.get("REAPER_BENCH_DSN") else "REAPER_TEST_DSN"
    with devserver.server(env) as server:
        dsn = devserver.create_database(server)
        try:
            seed(dsn, args.rows, args.held)
            settings = build_settings(
                {"dsn": dsn, "busy_share": "1", "strategy": args.strategy},
                {
                    "sweeps": {
                        "events": {
                            "table": "public.events",
                            "reason": "old",
                            "age": "logged_at",
                            "retention": "30d",
                            "max_eligible_fraction": "1",
                        }
                    }
                },
            )
            sweep = by_name(configured_sweeps(settings))["events"]
            sweeper = Sweeper()
            print(f"{args.rows:,} stale rows, {args.held:,} held, strategy {args.strategy}")
            print("| run | seconds | rows deleted | failed statements | strategy | outcome |")
            print("|---|---|---|---|---|---|")
            with Database(connection_settings(settings)) as db:
                for n in range(1, args.runs + 1):
                    t0 = time.monotonic()
                    with structlog.testing.capture_logs() as logs:
                        result = sweeper.run(db, sweep, engine_options(settings))
                    seconds = time.monotonic() - t0
                    failed = sum(e["event"] in ("batch_split", "row_skipped") for e in logs)
                    print(
                        f"| {n} | {seconds:.2f} | {result.rows:,} | {failed:,} | "
                        f"{result.strategy} | {result.outcome} |",
                        flush=True,
                    )
        finally:
            devserver.drop_database(dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
