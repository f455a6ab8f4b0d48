"""Custom sweeps in the config file: what is accepted, and every rejection as an operator sees
it through the real CLI (one line on stderr, exit code 2, before any database work).

The DSN points at a port where nothing listens: a test that got past validation would fail
to connect and exit 1, never 2.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reaper import cli
from reaper.config.load import load_config
from reaper.config.settings import build_settings
from reaper.config.sweeps import Budget, configured_sweeps
from reaper.errors import ConfigError
from reaper.sqltext.predicates import PredicateError, check
from tests.support import BUILTIN_SWEEPS, enabled

NOWHERE = "postgresql://reaper@127.0.0.1:1/nowhere?connect_timeout=1"
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "token-table.toml"

GOOD = """
[sweeps.worker_tokens]
table = "public.token"
reason = "worker_stale"
predicate = "token_type = 'worker' AND updated_at < %(cutoff)s"
retention = "30d"
"""


def run_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, *args: str
) -> tuple[int, str]:
    """``reaper run-once --config <toml> ARGS`` in process: (exit code, stderr)."""
    path = tmp_path / "reaper.toml"
    path.write_text(toml)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run-once", "--config", str(path), "--dsn", NOWHERE, *args])
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def declared(predicate: str, extra: str = "") -> str:
    return (
        f'[sweeps.t]\ntable = "token"\nreason = "stale"\npredicate = """{predicate}"""\n'
        f'retention = "30d"\n{extra}\n'
    )


# (case, TOML, words the one line must contain)
REJECTED = [
    ("semicolon", declared("updated_at < %(cutoff)s;"), "ends with a semicolon"),
    (
        "second statement",
        declared("updated_at < %(cutoff)s; DELETE FROM token"),
        "second statement",
    ),
    (
        "DELETE CTE",
        declared(
            "EXISTS (WITH d AS (DELETE FROM token RETURNING 1) SELECT 1 FROM d) "
            "AND updated_at < %(cutoff)s"
        ),
        "contains DELETE",
    ),
    (
        "UPDATE CTE",
        declared(
            "id IN (WITH u AS (UPDATE token SET active = false RETURNING id) SELECT id FROM u) "
            "AND updated_at < %(cutoff)s"
        ),
        "contains UPDATE",
    ),
    ("pg_sleep", declared("updated_at < %(cutoff)s AND pg_sleep(10) IS NOT NULL"), "pg_sleep"),
    # ts_stat runs the query text it is given: a way around every other refusal.
    ("ts_stat", declared("updated_at < %(cutoff)s AND EXISTS (SELECT 1 FROM "
                         "ts_stat('SELECT to_tsvector(pg_sleep(3)::text)'))"), "ts_stat"),
    (
        "set_config",
        declared("updated_at < %(cutoff)s AND set_config('role', 'x', false) = 'x'"),
        "set_config",
    ),
    ("advisory lock", declared("pg_advisory_lock(1) IS NULL AND updated_at < %(cutoff)s"),
     "pg_advisory_lock"),
    ("dblink", declared("updated_at < %(cutoff)s AND dblink_exec('x') = ''"), "dblink_exec"),
    ("comment", declared("updated_at < %(cutoff)s -- all"), "comment"),
    ("paren escape", declared("updated_at < %(cutoff)s) OR (true"), "parenthesis"),
    ("unknown parameter", declared("updated_at < %(since)s"), "%(since)s"),
    ("unused cutoff", declared("NOT active"), "does not use the cutoff"),
    ("positional", declared("updated_at < %s"), "positional"),
    ("dollar param", declared("updated_at < %(cutoff)s AND id > $1"), "positional"),
    ("lone percent", declared("key LIKE 'w-%' AND updated_at < %(cutoff)s"), "%%"),
    ("syntax", declared("updated_at <<< %(cutoff)s ORDER BY id"), "not valid SQL"),
    ("other table", declared("nodes.banned AND updated_at < %(cutoff)s"), "another table"),
    ("not boolean", declared("ARRAY[%(cutoff)s]"), "not a boolean"),
    ("unknown after", declared("updated_at < %(cutoff)s", 'after = ["nope"]'),
     "no sweep is named 'nope'"),
    (
        "cycle",
        declared("updated_at < %(cutoff)s", 'after = ["u"]')
        + '[sweeps.u]\ntable = "token"\nreason = "stale"\n'
        'predicate = "created_at < %(cutoff)s"\nretention = "1d"\nafter = ["t"]\n',
        "cycle",
    ),
    ("after itself", declared("updated_at < %(cutoff)s", 'after = ["t"]'), "itself"),
    ("duplicate table in TOML", GOOD + GOOD, "not valid TOML"),
    (
        "name of a built-in",
        '[sweeps.nodes_silent]\ntable = "token"\nreason = "x"\n'
        'predicate = "updated_at < %(cutoff)s"\nretention = "1d"\n',
        "redefines the built-in sweep 'nodes_silent'",
    ),
    ("missing table", '[sweeps.t]\nreason = "stale"\nretention = "1d"\n', "no table key"),
    ("missing predicate", '[sweeps.t]\ntable = "token"\nreason = "x"\nretention = "1d"\n',
     "no predicate key"),
    ("missing retention", '[sweeps.t]\ntable = "token"\nreason = "x"\npredicate = "true"\n',
     "no retention key"),
    ("bad duration", GOOD.replace('"30d"', '"30 days"'), "is not a duration"),
    ("negative duration", GOOD.replace('"30d"', '"-1d"'), "must be positive"),
    ("bad table", GOOD.replace("public.token", "a.b.c"), "schema.name"),
    ("bad reason", GOOD.replace("worker_stale", "Worker Stale"), "reason label"),
    ("bad name", GOOD.replace("worker_tokens", "Worker-Tokens"), "lower case"),
    ("key option", GOOD + 'key = "id"\n', "ctid"),
    ("unknown key", GOOD + 'retention_days = 3\n', "unknown key(s) retention_days"),
    ("bad strategy", GOOD + 'strategy = "fast"\n', "strategy"),
    ("zero batch_size", GOOD + "batch_size = 0\n", "batch_size"),
    ("zero batch_size as text", GOOD + 'batch_size = "0"\n', "batch_size"),
    ("negative batch_size", GOOD + "batch_size = -5\n", "batch_size"),
    ("zero global batch_size", "batch_size = 0\n" + GOOD, "batch_size"),
    ("bad after type", GOOD + "after = 3\n", "list of sweep names"),
    (
        "retention table for a single-cutoff predicate",
        GOOD.replace('retention = "30d"', 'retention = { since = "30d" }'),
        "%(cutoff)s",
    ),
    (
        "a cutoff that moved to another sweep",
        '[sweeps.enrollment_requests]\nretention = { cutoff = "30d", ephemeral_cutoff = "2h" }\n',
        "ephemeral_cutoff is now [sweeps.enrollment_requests_ephemeral] retention",
    ),
    (
        "ephemeral requests kept longer than the others",
        '[sweeps.enrollment_requests_ephemeral]\nretention = "40d"\n',
        "[sweeps.enrollment_requests_ephemeral] retention (40d) is longer than node_retention "
        "(30d), the retention of enrollment_requests",
    ),
    (
        "regular members kept shorter than ephemeral ones",
        '[sweeps.nodes_silent]\nretention = "30m"\n',
        "ephemeral_node_retention (1h) is longer than [sweeps.nodes_silent] retention (30m)",
    ),
    (
        "both retentions per sweep",
        '[sweeps.nodes_ephemeral]\nretention = "3h"\n[sweeps.nodes_silent]\nretention = "2h"\n',
        "[sweeps.nodes_ephemeral] retention (3h) is longer than [sweeps.nodes_silent] "
        "retention (2h)",
    ),
    (
        "a built-in's name mistyped",
        '[sweeps.nodes_silnt]\nretention = "3d"\n',
        "[sweeps.nodes_silnt] has no table key and no built-in sweep has that name; "
        "did you mean 'nodes_silent'?",
    ),
    ("the sweeps table mistyped", '[sweep.nodes_silent]\nretention = "3d"\n',
     "unknown setting 'sweep'; did you mean 'sweeps'?"),
    (
        "unknown cutoff of a built-in",
        '[sweeps.enrollment_requests]\nretention = { soon = "1d" }\n',
        "no cutoff 'soon'",
    ),
]


@pytest.mark.parametrize(
    ("toml", "expected"), [(t, e) for _, t, e in REJECTED], ids=[c for c, _, _ in REJECTED]
)
def test_rejected_config_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, expected: str
) -> None:
    code, err = run_cli(tmp_path, capsys, toml)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("reaper: "), err
    assert expected in lines[0], err
    assert "Traceback" not in err


def test_a_predicate_error_names_the_file_and_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = run_cli(tmp_path, capsys, declared("pg_sleep(1) IS NULL AND x < %(cutoff)s"))
    assert err.startswith(f"reaper: {tmp_path / 'reaper.toml'}: [sweeps.t] predicate calls ")


def test_an_unknown_sweep_name_on_the_command_line_lists_the_declared_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(tmp_path, capsys, GOOD, "--sweep", "nope")
    assert code == 2
    assert "worker_tokens" in err and "nodes_silent" in err
    # A near miss gets the name it was meant to be.
    code, err = run_cli(tmp_path, capsys, GOOD, "--sweep", "worker_tokns")
    assert code == 2
    assert err.strip() == "reaper: unknown sweep 'worker_tokns'; did you mean 'worker_tokens'?"


def test_the_shipped_example_loads() -> None:
    config = cli.load(EXAMPLE, {})
    settings, sweeps = config.settings, {s.name: s for s in config.sweeps}
    assert sweeps["worker_tokens"].table == "public.token"
    assert sweeps["worker_tokens"].reason == "worker_stale"
    assert sweeps["machine_tokens"].retentions == {"cutoff": timedelta(days=90)}
    assert sweeps["worker_tokens"].interval == timedelta(minutes=10)
    assert [s.name for s in enabled(settings, [])] == [
        "worker_tokens",
        "machine_tokens",
    ]


def test_every_builtin_predicate_passes_the_checker() -> None:
    for sweep in BUILTIN_SWEEPS:
        check(sweep.predicate, sweep.table, set(sweep.retentions))


@pytest.mark.parametrize(
    "predicate",
    [
        "token_type = 'worker' AND updated_at < %(cutoff)s",
        "key LIKE 'w-%%' AND updated_at < %(cutoff)s",
        "note = 'a;b -- c /* d */' AND updated_at < %(cutoff)s",
        "token.active IS FALSE AND public.token.created_at < %(cutoff)s",
        "NOT EXISTS (SELECT 1 FROM sessions s WHERE s.token_id = token.id) "
        "AND created_at < %(cutoff)s",
        "(expires_at < %(cutoff)s) OR (expires_at IS NULL AND created_at < %(cutoff)s)",
    ],
)
def test_read_only_predicates_are_accepted(predicate: str) -> None:
    check(predicate, "public.token", {"cutoff"})


def test_several_cutoffs_are_named_by_a_retention_table() -> None:
    settings = build_settings(
        {},
        {
            "sweeps": {
                "tokens": {
                    "table": "token",
                    "reason": "stale",
                    "predicate": "(token_type = 'worker' AND updated_at < %(worker_cutoff)s)"
                    " OR (token_type = 'machine' AND created_at < %(machine_cutoff)s)",
                    "retention": {"worker_cutoff": "7d", "machine_cutoff": "90d"},
                }
            }
        },
    )
    sweep = {s.name: s for s in configured_sweeps(settings)}["tokens"]
    assert sweep.retentions == {
        "worker_cutoff": timedelta(days=7), "machine_cutoff": timedelta(days=90)
    }


def test_builtins_are_disabled_or_given_a_retention_and_budget() -> None:
    settings = build_settings(
        {"max_rows_per_run": "100"},
        {
            "sweeps": {
                "nodes_silent": {"retention": "14d", "max_seconds_per_run": "30s"},
                "router_leases": {"enabled": False},
                "bootstrap_tokens": {"after": ["nodes_silent"]},
            }
        },
    )
    sweeps = {s.name: s for s in configured_sweeps(settings)}
    silent = sweeps["nodes_silent"]
    assert silent.retentions == {"cutoff": timedelta(days=14)}
    # Other sweeps that read node_retention keep it.
    assert sweeps["router_leases"].retentions == {"cutoff": settings.node_retention}
    assert not sweeps["router_leases"].enabled
    assert sweeps["bootstrap_tokens"].after == (
        "enrollment_requests", "enrollment_requests_ephemeral", "nodes_silent"
    )
    assert silent.budget == Budget(max_rows=100, max_seconds=30.0)
    assert sweeps["router_leases"].budget == Budget(max_rows=100, max_seconds=None)
    names = [s.name for s in enabled(settings, [])]
    assert "router_leases" not in names
    # Named explicitly, a disabled sweep runs: that is how a new declaration is dry-run.
    assert [s.name for s in enabled(settings, ["router_leases"])] == ["router_leases"]


def test_declared_sweeps_follow_their_after_in_the_one_list() -> None:
    settings = build_settings(
        {},
        {
            "sweeps": {
                "children": {
                    "table": "child",
                    "reason": "stale",
                    "predicate": "created_at < %(cutoff)s",
                    "retention": "1d",
                    "after": ["parents"],
                },
                "parents": {
                    "table": "parent",
                    "reason": "stale",
                    "predicate": "created_at < %(cutoff)s",
                    "retention": "1d",
                },
            }
        },
    )
    names = [s.name for s in configured_sweeps(settings)]
    assert names.index("parents") < names.index("children")
    assert names[: len(BUILTIN_SWEEPS)] == [s.name for s in BUILTIN_SWEEPS]


def test_settings_refuse_a_bad_predicate_without_a_database() -> None:
    with pytest.raises(ConfigError, match=r"\[sweeps\.t\] predicate contains DELETE"):
        load_config(
            {},
            {
                "sweeps": {
                    "t": {
                        "table": "t",
                        "reason": "x",
                        "predicate": "EXISTS (WITH d AS (DELETE FROM t RETURNING 1) "
                        "SELECT 1 FROM d) AND c < %(cutoff)s",
                        "retention": "1d",
                    }
                }
            },
        )


def test_the_predicate_error_is_a_value_error() -> None:
    with pytest.raises(PredicateError):
        check("x < %(cutoff)s; SELECT 1", "t", {"cutoff"})


@pytest.mark.parametrize("args", [("--batch-size", "0"), ("--batch-size", "-1")])
def test_a_zero_global_batch_size_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, err = run_cli(tmp_path, capsys, GOOD, *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "batch" in err.lower(), err
