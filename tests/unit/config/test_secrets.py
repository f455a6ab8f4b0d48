"""Secrets stay out of sight: every password of any length is scrubbed from error text, where a
password goes, without mangling the rest; a password on the command line is warned about once."""

from __future__ import annotations

import pytest
from psycopg.conninfo import make_conninfo

from reaper.db import _Redactor, dsn_has_password

PASSWORDS = [
    "a",
    "pw",
    "x1!",
    "on",
    "abcd",
    "s3cret",
    "Sekr%zz",
    "a'b\\c",
    "with space",
    "long-enough-password",
    "é",
    "$1(",
    ".",
]
TEXT = "a connection on host db failed: FATAL: no pg_hba.conf entry. see password docs"


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "where",
    [
        'invalid percent-encoded token: "{pw}"',
        'invalid connection option in "host=db password={pw_q}"',
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
    assert (
        redact("postgresql://u:zz@h/db and password=qq and password = 'x y'")
        == "postgresql://u:***@h/db and password=*** and password = ***"
    )


@pytest.mark.parametrize(
    ("dsn", "has"),
    [
        ("host=db password=x", True),
        ("postgresql://u:p@h/d", True),
        ("host=db", False),
        ("postgresql://u@h/d", False),
        ("postgresql://u:Sekr%zz@h/d", True),
    ],
)
def test_dsn_has_password(dsn: str, has: bool) -> None:
    assert dsn_has_password(dsn) is has


# The deployments' way: a service file holding the password, readable by a group (a
# Kubernetes Secret volume's files are root's, mode 0440, group fsGroup), REAPER_DSN naming
# the service. On a throwaway cluster that asks every login for a password.
