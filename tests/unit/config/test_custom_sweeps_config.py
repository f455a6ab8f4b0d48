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
from tests.support import BUILTIN_SWEEPS, enabled
from tests.support.custom_sweeps_config import NOWHERE, SQL_TEXT, declared, legacy

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "token-table.toml"

GOOD = """
[sweeps.worker_tokens]
table = "public.token"
reason = "worker_stale"
age = "updated_at"
where = { token_type = "worker" }
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


AGE = 'age = "updated_at"\nretention = "30d"'


# (case, TOML, words the one line must contain)
REJECTED = [
    # SQL text, hostile or not, never reaches the parser of the server: refused at load.
    ("semicolon", legacy("updated_at < %(cutoff)s;"), SQL_TEXT),
    ("second statement", legacy("updated_at < %(cutoff)s; DELETE FROM token"), SQL_TEXT),
    (
        "DELETE CTE",
        legacy(
            "EXISTS (WITH d AS (DELETE FROM token RETURNING 1) SELECT 1 FROM d)"
            " AND updated_at < %(cutoff)s"
        ),
        SQL_TEXT,
    ),
    ("pg_sleep", legacy("updated_at < %(cutoff)s AND pg_sleep(10) IS NOT NULL"), SQL_TEXT),
    ("paren escape", legacy("updated_at < %(cutoff)s) OR (true"), SQL_TEXT),
    ("since", declared(AGE, 'since = "updated_at"'), "[sweeps.t] since: SQL text"),
    # The declaration itself.
    ("no age", declared('retention = "30d"'), "[sweeps.t] has no age key"),
    ("no retention", declared('age = "updated_at"'), "[sweeps.t] has no retention key"),
    (
        "retention table",
        declared('age = "updated_at"\nretention = { a = "1d" }'),
        "one duration per rule",
    ),
    ("empty age", declared('age = []\nretention = "1d"'), "give a column name"),
    ("age twice", declared('age = ["a", "a"]\nretention = "1d"'), "names a column twice"),
    ("empty IN", declared(AGE, "where = { token_type = [] }"), "an empty list"),
    ("mixed IN", declared(AGE, 'where = { token_type = ["a", 1] }'), "mixes kinds"),
    ("float value", declared(AGE, "where = { n = 1.5 }"), "text, whole numbers or true/false"),
    ("table value", declared(AGE, "where = { n = { a = 1 } }"), "text, whole numbers"),
    (
        "huge integer",
        declared(AGE, "where = { n = 99999999999999999999 }"),
        "outside the range of a bigint",
    ),
    (
        "two filters on a column",
        declared(AGE, 'where = { a = 1 }\nis_null = ["a"]'),
        "column a has two filters",
    ),
    (
        "control character in a name",
        declared('age = "upd\\u0000ated"\nretention = "1d"'),
        "control character",
    ),
    ("long name", declared(f'age = "{"x" * 64}"\nretention = "1d"'), "63 bytes"),
    (
        "long table name",
        declared(AGE).replace("public.token", "public." + "t" * 64),
        "[sweeps.t] table: ",
    ),
    (
        "rules and top-level keys",
        declared(AGE, '[[sweeps.t.rule]]\nage = "a"\nretention = "1d"'),
        "has both age and [[sweeps.t.rule]]",
    ),
    (
        "unknown rule key",
        declared("", '[[sweeps.t.rule]]\nage = "a"\nretention = "1d"\npredicate = "true"'),
        "[[sweeps.t.rule]] (1) has unknown key predicate",
    ),
    (
        "rule without retention",
        declared("", '[[sweeps.t.rule]]\nage = "a"'),
        "[[sweeps.t.rule]] (1) has no retention key",
    ),
    (
        "reference without column",
        declared(AGE, 'keep_referenced = { table = "public.s" }'),
        "keep_referenced (1)",
    ),
    (
        "reference to an unqualified table",
        declared(AGE, 'keep_referenced = { table = "s", column = "t_id" }'),
        "schema.name",
    ),
    (
        "reference to the catalog",
        declared(AGE, 'keep_referenced = { table = "pg_catalog.pg_class", column = "oid" }'),
        "system catalog",
    ),
    # A catalog table is never a target.
    (
        "pg_catalog",
        declared(AGE).replace("public.token", "pg_catalog.pg_class"),
        "[sweeps.t] table: pg_catalog.pg_class is a table of the system catalog",
    ),
    (
        "information_schema",
        declared(AGE).replace("public.token", "information_schema.tables"),
        "system catalog",
    ),
    ("pg_toast", declared(AGE).replace("public.token", "pg_toast.pg_toast_1259"), "system catalog"),
    ("pg_temp", declared(AGE).replace("public.token", "pg_temp_3.t"), "system catalog"),
    ("unqualified table", declared(AGE).replace("public.token", "token"), "is not schema.name"),
    ("unknown after", declared(AGE, 'after = ["nope"]'), "no sweep is named 'nope'"),
    (
        "cycle",
        declared(AGE, 'after = ["u"]') + '[sweeps.u]\ntable = "public.token"\nreason = "stale"\n'
        'age = "created_at"\nretention = "1d"\nafter = ["t"]\n',
        "cycle",
    ),
    ("after itself", declared(AGE, 'after = ["t"]'), "itself"),
    ("duplicate table in TOML", GOOD + GOOD, "not valid TOML"),
    (
        "name of a built-in",
        '[sweeps.nodes_silent]\ntable = "public.token"\nreason = "x"\n'
        'age = "updated_at"\nretention = "1d"\n',
        "redefines the built-in sweep 'nodes_silent'",
    ),
    (
        "built-in given an age",
        '[sweeps.nodes_silent]\nage = "x"\n',
        "redefines the built-in sweep 'nodes_silent' (age)",
    ),
    ("missing table", '[sweeps.t]\nreason = "stale"\nretention = "1d"\n', "no table key"),
    (
        "missing reason",
        '[sweeps.t]\ntable = "public.token"\nage = "a"\nretention = "1d"\n',
        "no reason key",
    ),
    ("bad duration", GOOD.replace('"30d"', '"30 days"'), "is not a duration"),
    ("negative duration", GOOD.replace('"30d"', '"-1d"'), "must be positive"),
    ("bad table", GOOD.replace("public.token", "a.b.c"), "schema.name"),
    ("bad reason", GOOD.replace("worker_stale", "Worker Stale"), "reason label"),
    ("bad name", GOOD.replace("worker_tokens", "Worker-Tokens"), "lower case"),
    ("key named twice", GOOD + 'key = ["id", "id"]\n', "key: names a column twice"),
    ("key not a name", GOOD + "key = 3\n", "key: 3"),
    ("unknown key", GOOD + "retention_days = 3\n", "unknown key(s) retention_days"),
    ("bad strategy", GOOD + 'strategy = "fast"\n', "strategy"),
    ("zero batch_size", GOOD + "batch_size = 0\n", "batch_size"),
    ("zero batch_size as text", GOOD + 'batch_size = "0"\n', "batch_size"),
    ("negative batch_size", GOOD + "batch_size = -5\n", "batch_size"),
    ("zero global batch_size", "batch_size = 0\n" + GOOD, "batch_size"),
    ("bad after type", GOOD + "after = 3\n", "list of sweep names"),
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
    (
        "the sweeps table mistyped",
        '[sweep.nodes_silent]\nretention = "3d"\n',
        "unknown setting 'sweep'; did you mean 'sweeps'?",
    ),
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


def test_sql_text_is_refused_naming_the_file_and_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = run_cli(tmp_path, capsys, legacy("pg_sleep(1) IS NULL AND x < %(cutoff)s"))
    assert err == (
        f"reaper: {tmp_path / 'reaper.toml'}: {SQL_TEXT}; declare the sweep as data (age, "
        "retention, where, keep_referenced; see docs/custom-sweeps.md)\n"
    )


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
    assert sweeps["worker_tokens"].table == "token"
    assert sweeps["worker_tokens"].table.qualified == "public.token"
    assert sweeps["worker_tokens"].reason == "worker_stale"
    assert sweeps["machine_tokens"].retentions == {"rule_cutoff_1": timedelta(days=90)}
    assert sweeps["worker_tokens"].interval == timedelta(minutes=10)
    assert [s.name for s in enabled(settings, [])] == [
        "worker_tokens",
        "machine_tokens",
    ]


# (former predicate, retention, the declaration the refusal shows)
TRANSLATED = [
    ("updated_at < %(cutoff)s", '"30d"', 'age = "updated_at", retention = "30d"'),
    ("%(cutoff)s > token.updated_at", '"30d"', 'age = "updated_at", retention = "30d"'),
    (
        "token_type = 'worker' AND NOT active AND expires_at IS NULL AND updated_at < %(cutoff)s",
        '"7d"',
        'age = "updated_at", where = { token_type = "worker", active = false }, '
        'is_null = ["expires_at"], retention = "7d"',
    ),
    (
        "token_type IN ('a', 'b') AND n <> 3 AND key IS NOT NULL AND created_at < %(cutoff)s",
        '"1d"',
        'age = "created_at", where = { token_type = ["a", "b"] }, where_not = { n = 3 }, '
        'not_null = ["key"], retention = "1d"',
    ),
    (
        "coalesce(resolved_at, created_at) < %(cutoff)s",
        '"30d"',
        'age = ["resolved_at", "created_at"], retention = "30d"',
    ),
    (
        "resolved_at < %(cutoff)s OR (resolved_at IS NULL AND created_at < %(cutoff)s)",
        '"30d"',
        'age = ["resolved_at", "created_at"], retention = "30d"',
    ),
    (
        "expires_at < %(cutoff)s AND NOT EXISTS (SELECT 1 FROM enrollment_requests r "
        "WHERE r.token_id = token.id)",
        '"30d"',
        'age = "expires_at", retention = "30d", keep_referenced = [{ table = '
        '"public.enrollment_requests", column = "token_id", key = "id" }]',
    ),
    (
        "(CASE WHEN token_type = 'worker' THEN updated_at END) < %(cutoff)s",
        '"30d"',
        'age = "updated_at", age_when = { token_type = "worker" }, retention = "30d"',
    ),
    (
        "(token_type = 'worker' AND updated_at < %(w)s) OR (token_type = 'machine' AND "
        "created_at < %(m)s)",
        '{ w = "7d", m = "90d" }',
        'rule = [{ age = "updated_at", where = { token_type = "worker" }, retention = "7d" }, '
        '{ age = "created_at", where = { token_type = "machine" }, retention = "90d" }]',
    ),
]


@pytest.mark.parametrize(("predicate", "retention", "new"), TRANSLATED)
def test_a_former_predicate_is_refused_with_its_declaration(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    predicate: str,
    retention: str,
    new: str,
) -> None:
    toml = legacy(predicate).replace('retention = "30d"', f"retention = {retention}")
    code, err = run_cli(tmp_path, capsys, toml)
    assert code == 2
    assert err == (
        f"reaper: {tmp_path / 'reaper.toml'}: {SQL_TEXT}; replace predicate and retention "
        f"with: {new}\n"
    )
    # The declaration shown is one that loads, and compiles to the same cutoffs.
    body = "\n".join(
        line for line in toml.splitlines() if not line.startswith(("predicate", "retention"))
    )
    if new.startswith("rule = "):
        fixed = body + "\n" + new.split(", keep_referenced")[0] + "\n"
    else:
        fixed = body + "\n" + "\n".join(_keys(new)) + "\n"
    path = tmp_path / "fixed.toml"
    path.write_text(fixed)
    cli.load(path, {})


def _keys(inline: str) -> list[str]:
    """``a = 1, b = { c = 2 }`` as TOML lines (the top level split at its commas)."""
    out, depth, current = [], 0, ""
    for ch in inline:
        depth += int(ch in "{[")
        depth -= int(ch in "}]")
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    return [*out, current.strip()]


def test_an_unknown_shape_points_at_the_docs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(tmp_path, capsys, legacy("date_trunc('day', updated_at) < %(cutoff)s"))
    assert code == 2 and len(err.splitlines()) == 1
    assert err.endswith("see docs/custom-sweeps.md)\n"), err


def test_several_rules_each_with_its_own_retention() -> None:
    settings = build_settings(
        {},
        {
            "sweeps": {
                "tokens": {
                    "table": "public.token",
                    "reason": "stale",
                    "rule": [
                        {"age": "updated_at", "where": {"token_type": "worker"}, "retention": "7d"},
                        {
                            "age": "created_at",
                            "where": {"token_type": "machine"},
                            "retention": "90d",
                        },
                    ],
                }
            }
        },
    )
    sweep = {s.name: s for s in configured_sweeps(settings)}["tokens"]
    assert sweep.retentions == {
        "rule_cutoff_1": timedelta(days=7),
        "rule_cutoff_2": timedelta(days=90),
    }
    assert sweep.predicate.cutoffs == ("rule_cutoff_1", "rule_cutoff_2")


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
        "enrollment_requests",
        "enrollment_requests_ephemeral",
        "nodes_silent",
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
                    "table": "public.child",
                    "reason": "stale",
                    "age": "created_at",
                    "retention": "1d",
                    "after": ["parents"],
                },
                "parents": {
                    "table": "public.parent",
                    "reason": "stale",
                    "age": "created_at",
                    "retention": "1d",
                },
            }
        },
    )
    names = [s.name for s in configured_sweeps(settings)]
    assert names.index("parents") < names.index("children")
    assert names[: len(BUILTIN_SWEEPS)] == [s.name for s in BUILTIN_SWEEPS]


def test_settings_refuse_sql_text_without_a_database() -> None:
    with pytest.raises(ConfigError, match=r"\[sweeps\.t\] predicate: SQL text"):
        load_config(
            {},
            {
                "sweeps": {
                    "t": {
                        "table": "public.t",
                        "reason": "x",
                        "retention": "1d",
                        "predicate": "EXISTS (WITH d AS (DELETE FROM t RETURNING 1)"
                        " SELECT 1 FROM d) "
                        "AND c < %(cutoff)s",
                    }
                }
            },
        )


@pytest.mark.parametrize("args", [("--batch-size", "0"), ("--batch-size", "-1")])
def test_a_zero_global_batch_size_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, err = run_cli(tmp_path, capsys, GOOD, *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "batch" in err.lower(), err


def test_a_rule_of_several_ages_has_disjoint_arms_and_several_rules_have_none() -> None:
    """Arm i of a rule holds every earlier age IS NULL and its own age < cutoff, and the rule's
    filters and references; several rules (which may match one row) and one age have none."""
    from reaper.sqltext.declared import Filter, Reference, Rule, compile_declaration

    ref = Reference("public", "holds", "ticket_id", "id")
    three = compile_declaration(
        "public",
        "tickets",
        [Rule(("a", "b", "c"), where=(Filter("kind", "eq", ("x",)),))],
        [ref],
        cutoffs=["cutoff"],
    )
    arms = [a.where.as_string(None) for a in three.arms]
    assert [a.age.as_string(None) for a in three.arms] == ['"a"', '"b"', '"c"']
    assert arms[0].startswith('(("a" OPERATOR(pg_catalog.<) %(cutoff)s))')
    assert arms[1].startswith('(("a" IS NULL) AND ("b" OPERATOR(pg_catalog.<) %(cutoff)s))')
    assert arms[2].startswith('(("a" IS NULL) AND ("b" IS NULL) AND ("c" OPERATOR')
    assert all('"kind" OPERATOR(pg_catalog.=)' in a and "NOT EXISTS" in a for a in arms)
    assert three.cutoffs == ("cutoff",)
    assert three.since is not None and three.since.as_string(None) == 'COALESCE("a", "b", "c")'

    assert compile_declaration("public", "t", [Rule(("a",))]).arms == ()
    assert compile_declaration("public", "t", [Rule(("a", "b")), Rule(("c",))]).arms == ()
    with pytest.raises(ValueError, match="cutoff names"):
        compile_declaration("public", "t", [Rule(("a",))], cutoffs=["x", "y"])
