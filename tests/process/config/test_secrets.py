"""Secrets stay out of sight: every password of any length is scrubbed from error text, where a
password goes, without mangling the rest; a password on the command line is warned about once."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from tests.support import PASSWORD, run_reaper

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


def test_a_password_on_the_command_line_is_warned_about_once() -> None:
    dsn = make_conninfo(UNREACHABLE, password="pw")
    run = run_reaper("run-once", "--dsn", dsn)
    warnings = [line for line in run.stderr_lines if "password_on_command_line" in line]
    assert len(warnings) == 1, run.stderr
    assert "PGPASSFILE" in warnings[0] and "pw@" not in run.stderr
    assert run.code == 1  # then the unreachable database, as always


def test_a_password_in_the_environment_is_not_warned_about() -> None:
    run = run_reaper("run-once", env={"REAPER_DSN": make_conninfo(UNREACHABLE, password="pw")})
    assert "password_on_command_line" not in run.stderr


# The deployments' way: a service file holding the password, readable by a group (a
# Kubernetes Secret volume's files are root's, mode 0440, group fsGroup), REAPER_DSN naming
# the service. On a throwaway cluster that asks every login for a password.


def test_a_group_readable_service_file_brings_the_password(
    seeded: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    monkeypatch.delenv("PGPASSWORD")
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    params = conninfo_to_dict(seeded)
    service = tmp_path / "pg_service.conf"
    service.write_text(
        "[control]\n" + "".join(f"{k}={v}\n" for k, v in params.items()) + f"password={PASSWORD}\n"
    )
    service.chmod(0o440)
    run = run_reaper(
        "status", "--json", env={"REAPER_DSN": "service=control", "PGSERVICEFILE": str(service)}
    )
    assert run.code == 0, run.stderr
    assert PASSWORD not in run.stdout + run.stderr
    # A password file that its group can read is ignored by libpq: why the deployments use a
    # service file for a Secret mounted as a file.
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:*:{PASSWORD}\n")
    passfile.chmod(0o640)
    run = run_reaper("status", env={"REAPER_DSN": seeded, "PGPASSFILE": str(passfile)})
    assert run.code == 1 and PASSWORD not in run.stderr
