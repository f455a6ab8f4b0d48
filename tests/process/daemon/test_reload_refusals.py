"""SIGHUP with a file that cannot be used: one reload_rejected line naming where the bad value
came from, and the daemon keeps sweeping on its running settings. A file nested 20,000 deep
once killed it (RecursionError); a bad DSN from the file was named --dsn; a 25-day
statement_timeout failed every connection instead of the load."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg

from tests.support.daemon import count, free_port, seed_routers, start_reaper, wait_for

N = 20_000


def test_a_bad_file_on_sighup_is_one_line_naming_its_origin(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text(f'dsn = "{dsn}"\nnode_retention = "60d"\n')
    seed_routers(conn, garbage=5, age="40 days")
    reaper = start_reaper(
        ["run", "--config", str(config), "--listen", f"127.0.0.1:{free_port()}"],
        tmp_path,
        env={
            "REAPER_INTERVAL": "1s",
            "REAPER_JITTER": "0",
            "REAPER_CHECK_INTERVAL": "0",
            "REAPER_EPHEMERAL_NODE_RETENTION": "1h",
        },
    )
    wait_for(
        "a first run of router_leases",
        lambda: any(e["sweep"] == "router_leases" for e in reaper.events("sweep_finished")),
    )
    bad = {
        "x = " + "[" * N + "]" * N: "arrays or inline tables nest deeper than 16",
        "[" + ".".join(["a"] * N) + "]": "a dotted key nests deeper than 16",
        f'dsn = "{dsn} password=s3cret garbage"': f"{config} key dsn: the DSN (not shown)",
        'statement_timeout = "25d"': f"{config} key statement_timeout: 25d is more than",
        'node_retention = "30m"': "from REAPER_EPHEMERAL_NODE_RETENTION",
    }
    for i, (text, words) in enumerate(bad.items(), 1):
        config.write_text(text + "\n")
        reaper.proc.send_signal(signal.SIGHUP)
        rejected = wait_for(f"rejection {i}", lambda i=i: reaper.events("reload_rejected")[i - 1 :])
        error = rejected[0]["error"]
        assert words in error and "\n" not in error and "s3cret" not in error, error
    assert reaper.proc.poll() is None
    assert not reaper.events("settings_reloaded")
    # Still on the settings it had: 60 days keeps the leases seeded 40 days ago, and sweeps
    # those past it.
    seed_routers(conn, garbage=5, age="70 days", prefix="later-")
    wait_for(
        "later garbage swept", lambda: count(conn, "routers", "router_id", "later-garbage-%") == 0
    )
    assert count(conn, "routers", "router_id", "garbage-%") == 5
    assert reaper.terminate() == 0
