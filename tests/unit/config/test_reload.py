"""Settings re-read for SIGHUP: the new file wins, flags still win, a bad file is one line."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reaper.config.load import reload_config
from reaper.config.settings import changed_settings
from reaper.errors import ConfigError


def test_reload_reads_the_file_again_under_the_same_flags(tmp_path: Path) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text('node_retention = "30d"\nbatch_size = 100\n')
    explicit = {"batch_size": "50"}
    first = reload_config(path, explicit).settings
    path.write_text(
        'node_retention = "14d"\nbatch_size = 100\nmax_seconds_per_run = "5m"\n'
        "[sweeps.router_leases]\nenabled = false\n"
    )
    config = reload_config(path, explicit)
    second = config.settings
    assert second.node_retention == timedelta(days=14)
    assert second.batch_size == 50  # the flag still wins over the file
    assert second.max_seconds_per_run == timedelta(minutes=5)
    assert "router_leases" not in [s.name for s in config.enabled()]
    assert [s.budget.max_seconds for s in config.enabled()] == [300.0] * 6
    # In declaration order: the per-sweep settings first.
    assert changed_settings(first, second) == [
        "max_seconds_per_run",
        "node_retention",
        "sweeps.router_leases",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node_retention = ", "is not valid TOML"),
        ('node_retention = "soon"', "node_retention: 'soon' is not a duration"),
        ("nod_retention = 1", "unknown setting 'nod_retention'"),
        ('ephemeral_node_retention = "40d"', "is longer than node_retention"),
        ('[sweeps.nodes_ephemeral]\nretention = "40d"', "is longer than node_retention"),
    ],
)
def test_an_invalid_file_is_rejected_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as exc:
        reload_config(path, {})
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_file_that_went_away_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        reload_config(tmp_path / "gone.toml", {})
