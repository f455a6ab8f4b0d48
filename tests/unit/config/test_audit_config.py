"""A sweep's audit trail in the config file: ``key``, ``archive`` and ``archive_file`` as an
operator writes them, what they resolve to, and every refusal through the real CLI (one line
on stderr, exit code 2, before any database work).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reaper import cli
from reaper.config.load import load_config
from reaper.config.sweeps import by_name
from reaper.sqltext.names import TableName
from reaper.vocab import PartitionAction
from tests.support.custom_sweeps_config import NOWHERE

DECLARED = """
[sweeps.events]
table = "public.events"
reason = "stale"
age = "at"
retention = "30d"
"""


def test_an_archive_resolves_to_a_table_name_and_turns_partition_retirement_off(
    tmp_path: Path,
) -> None:
    found = by_name(
        load_config(
            {},
            {
                "sweeps": {
                    "events": {
                        "table": "public.events",
                        "reason": "stale",
                        "age": "at",
                        "retention": "30d",
                        "archive": "Audit.Events Archive",
                        "key": ["id"],
                    },
                    "nodes_silent": {"archive_file": "/var/lib/reaper/nodes.jsonl"},
                    "nodes_session": {"archive": "audit.nodes", "partition_action": "detach"},
                }
            },
        ).sweeps
    )
    events = found["events"]
    assert events.archive == TableName("Audit", "Events Archive")
    assert events.key == ("id",)
    # A dropped partition's rows would never reach the archive.
    assert events.partition_action == PartitionAction.OFF
    assert found["nodes_silent"].archive_file == "/var/lib/reaper/nodes.jsonl"
    assert found["nodes_silent"].partition_action == PartitionAction.OFF
    # Detach keeps the rows (in the detached table): the sweep's own choice stands.
    assert found["nodes_session"].partition_action == PartitionAction.DETACH
    assert found["nodes_ephemeral"].archive is None
    assert found["nodes_ephemeral"].partition_action == PartitionAction.DROP


REFUSED = [
    (
        "archive not schema.name",
        DECLARED + 'archive = "events_archive"\n',
        "[sweeps.events] archive: 'events_archive' is not schema.name",
    ),
    ("archive of three parts", DECLARED + 'archive = "a.b.c"\n', "is not schema.name"),
    (
        "archive in the catalog",
        DECLARED + 'archive = "pg_catalog.pg_class"\n',
        "table of the system catalog",
    ),
    (
        "archive is the table",
        DECLARED + 'archive = "public.events"\n',
        "[sweeps.events] archive: events is the swept table itself",
    ),
    (
        "a built-in archived into its own table",
        '[sweeps.nodes_silent]\narchive = "public.nodes"\n',
        "is the swept table itself",
    ),
    ("archive not a string", DECLARED + "archive = 3\n", "archive: must be a non-empty string"),
    (
        "drop with an archive",
        DECLARED + 'archive = "audit.events"\npartition_action = "drop"\n',
        "[sweeps.events] partition_action: drop would delete a partition's rows without "
        "archiving them",
    ),
    (
        "drop with an archive file",
        DECLARED + 'archive_file = "/tmp/x.jsonl"\npartition_action = "drop"\n',
        "partition_action: drop would delete",
    ),
    (
        "relative archive file",
        DECLARED + 'archive_file = "events.jsonl"\n',
        "archive_file: 'events.jsonl' is not an absolute path",
    ),
    ("empty archive file", DECLARED + 'archive_file = ""\n', "archive_file"),
    ("archive file a list", DECLARED + 'archive_file = ["/a", "/b"]\n', "archive_file"),
    (
        "key on a built-in",
        '[sweeps.nodes_silent]\nkey = ["peer_id"]\n',
        "redefines the built-in sweep 'nodes_silent' (key)",
    ),
    ("empty key", DECLARED + "key = []\n", "key:"),
    ("key with a control character", DECLARED + 'key = ["a\\u0007"]\n', "key:"),
]


@pytest.mark.parametrize(
    ("toml", "expected"), [(t, e) for _, t, e in REFUSED], ids=[c for c, _, _ in REFUSED]
)
def test_a_bad_trail_setting_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, expected: str
) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(toml)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run-once", "--config", str(path), "--dsn", NOWHERE])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reaper: "), err
    assert expected in lines[0], err


def test_json_report_and_rows_on_standard_output_are_refused_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(DECLARED + 'archive_file = "-"\n')
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run-once", "--config", str(path), "--dsn", NOWHERE, "--json"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.strip() == (
        'reaper: [sweeps.events] archive_file: "-" writes the deleted rows to standard output, '
        "where --json writes its report; give the archive a file's path, or leave out --json"
    )
