"""Secrets stay out of sight: every password of any length is scrubbed from error text, where a
password goes, without mangling the rest; a password on the command line is warned about once."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from reaper.db import _Redactor, dsn_has_password
from tests.support import run_reaper
from tests.test_password import PASSWORD, password_server, seeded  # noqa: F401 (fixtures)

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"
PASSWORDS = ["a", "pw", "x1!", "on", "abcd", "s3cret", "Sekr%zz", "a'b\\c", "with space",
             "long-enough-password", "é", "$1(", "."]
TEXT = "a connection on host db failed: FATAL: no pg_hba.conf entry. see password docs"


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "where",
    [
        'invalid percent-encoded token: "{pw}"',
        "invalid connection option in \"host=db password={pw_q}\"",
        "could not connect with postgresql://reaper:{pw}@db/control",
        "bad value '{pw}'",
    ],
)
def test_every_password_is_scrubbed_where_a_password_goes(password: str, where: str) -> None:
    dsn = make_conninfo("host=db dbname=control user=reaper", password=password)
    quoted = "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
    text = where.format(pw=password, pw_q=quoted)
    scrubbed = _Redactor(dsn)(text)
    assert "***" in scrubbed, scrubbed
    if len(password) >= 3:
        assert password not in scrubbed, scrubbed


@pytest.mark.parametrize("password", PASSWORDS)
def test_unrelated_text_is_not_mangled(password: str) -> None:
    dsn = make_conninfo("host=db dbname=control user=reaper", password=password)
    assert _Redactor(dsn)(TEXT) == TEXT


def test_any_password_position_is_scrubbed_even_of_another_dsn() -> None:
    redact = _Redactor("host=db")
    assert redact("postgresql://u:zz@h/db and password=qq and password = 'x y'") == \
        "postgresql://u:***@h/db and password=*** and password = ***"


@pytest.mark.parametrize(
    ("dsn", "has"),
    [("host=db password=x", True), ("postgresql://u:p@h/d", True), ("host=db", False),
     ("postgresql://u@h/d", False), ("postgresql://u:Sekr%zz@h/d", True)],
)
def test_dsn_has_password(dsn: str, has: bool) -> None:
    assert dsn_has_password(dsn) is has


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


@pytest.mark.db
def test_a_group_readable_service_file_brings_the_password(
    seeded: str,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    monkeypatch.delenv("PGPASSWORD")
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    params = conninfo_to_dict(seeded)
    service = tmp_path / "pg_service.conf"
    service.write_text(
        "[control]\n" + "".join(f"{k}={v}\n" for k, v in params.items())
        + f"password={PASSWORD}\n"
    )
    service.chmod(0o440)
    run = run_reaper("status", "--json", env={"REAPER_DSN": "service=control",
                                              "PGSERVICEFILE": str(service)})
    assert run.code == 0, run.stderr
    assert PASSWORD not in run.stdout + run.stderr
    # A password file that its group can read is ignored by libpq: why the deployments use a
    # service file for a Secret mounted as a file.
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:*:{PASSWORD}\n")
    passfile.chmod(0o640)
    run = run_reaper("status", env={"REAPER_DSN": seeded, "PGPASSFILE": str(passfile)})
    assert run.code == 1 and PASSWORD not in run.stderr
