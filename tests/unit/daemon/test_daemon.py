"""`reaper run` in-process: the scheduler, budgets, backoff, locks, HTTP, gauges, outages.

Every test runs the real Daemon against a real PostgreSQL with short intervals, and waits on
what a user observes (rows gone, metric values, HTTP answers), never on a fixed sleep.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        (":9465", "", 9465),
        ("127.0.0.1:9465", "127.0.0.1", 9465),
        ("[::1]:9465", "::1", 9465),
    ],
)
def test_listen_addresses(listen, host, port) -> None:
    from reaper.config.settings import build_settings
    from reaper.config.values import split_listen

    assert split_listen(build_settings({"listen": listen}).listen) == (host, port)


@pytest.mark.parametrize("listen", ["9465", "host:", ":99999", "[::1:9465", "::1:x"])
def test_bad_listen_addresses(listen) -> None:
    from reaper.config.settings import build_settings
    from reaper.errors import ConfigError

    with pytest.raises(ConfigError, match="--listen"):
        build_settings({"listen": listen})


def test_a_since_of_sql_text_is_refused() -> None:
    from reaper.config.load import load_config
    from reaper.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[sweeps.audit_log\] since: SQL text"):
        load_config(
            {},
            {
                "sweeps": {
                    "audit_log": {
                        "table": "public.audit_log",
                        "reason": "expired",
                        "retention": "7d",
                        "age": "logged_at",
                        "since": "pg_terminate_backend(1)::timestamptz",
                    }
                }
            },
        )
