"""One story about reaper's privileges: docs/security.md's section "The database role: least
privilege" states what the role needs and why; every other page that gives grant advice links
to it, and no page (nor a deploy file's comment) says the role needs a privilege that section
does not list, or counts the grants differently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CANONICAL = ROOT / "docs" / "security.md"
ANCHOR = "security.md#the-database-role-least-privilege"
HEADING = "## The database role: least privilege"
# Every privilege (and predefined role) a sentence might tell reaper's role to hold.
PRIVILEGES = (
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "TRUNCATE",
    "REFERENCES",
    "TRIGGER",
    "USAGE",
    "CREATE",
    "TEMPORARY",
    "CONNECT",
    "EXECUTE",
    "BYPASSRLS",
    "SUPERUSER",
    "pg_monitor",
    "pg_read_all_stats",
    "pg_read_all_data",
    "pg_write_all_data",
    "pg_signal_backend",
)
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
_NAME = r"`?\*{0,2}\b(" + "|".join(PRIVILEGES) + r")\b\*{0,2}`?"
_NEED = re.compile(
    r"\b(needs?|require[sd]?|requiring|must (?:have|hold|be granted)|grants?|granted|granting"
    r")\b",
    re.I,
)
_NEGATION = re.compile(r"\b(no|never|not|nor|without|nothing|neither|revoke[sd]?|beyond)\b", re.I)
_WORDS = 4  # a negation this many words before a privilege's name negates it


def section(text: str) -> str:
    start = text.index(HEADING)
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def needed() -> set[str]:
    """What the canonical section's table says the role needs (its first column)."""
    rows = [
        r
        for r in section(CANONICAL.read_text()).splitlines()
        if r.startswith("| ") and not r.startswith(("| the role needs", "|---"))
    ]
    out = {m.group(1) for r in rows for m in re.finditer(_NAME, r.split("|")[1])}
    assert out, "the privileges section has no table of what the role needs"
    return out


def sentences(text: str) -> list[str]:
    """Sentences of the prose, each table row and each line of a code block on its own."""
    out, prose = [], []

    def flush() -> None:
        joined = " ".join(prose)
        out.extend(s for s in re.split(r"(?<=[.;!?])\s+(?=[A-Z`(*-])", joined) if s)
        prose.clear()

    fenced = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            flush()
        elif fenced or stripped.startswith(("|", "#")) or line.startswith("    "):
            flush()
            out.append(stripped)
        elif not stripped or stripped.startswith(("- ", "* ")) or re.match(r"\d+\. ", stripped):
            flush()
            prose.append(stripped)
        else:
            prose.append(stripped)
    flush()
    return out


def claimed(sentence: str) -> set[str]:
    """The privileges ``sentence`` says reaper's role needs (or is to be granted)."""
    out: set[str] = set()
    for m in re.finditer(r"\bGRANT\s+([\w\s,()]+?)\s+(?:ON\b.*?\s)?TO\s+reaper\b", sentence):
        out |= {p for p in PRIVILEGES if re.search(rf"\b{p}\b", m.group(1))}
    if re.search(
        r"\b(without|lacking|lacks)\b[^.]*" + _NAME + r"[^.]*\b(fails?|denied)\b", sentence, re.I
    ):
        out |= {m.group(1) for m in re.finditer(_NAME, sentence)}
    if not _NEED.search(sentence) or re.search(r"\bTO\s+(?!reaper\b)\w+", sentence):
        return out
    # "FOR UPDATE", "UPDATE nodes SET": statements, not privileges, unless "requires" them.
    plain = re.sub(r"\bUPDATE\s+\w+\s+SET\b", "", sentence)
    for m in re.finditer(_NAME, plain):
        before = plain[: m.start()].split()[-_WORDS:]
        if not any(_NEGATION.fullmatch(w.strip("`*(,:")) for w in before):
            out.add(m.group(1))
    return out


def contradictions(text: str, allowed: set[str]) -> list[str]:
    """Sentences of ``text`` that tell the role to hold a table privilege not in ``allowed``,
    or count the table privileges a sweep needs otherwise than ``allowed`` does."""
    count = len(allowed & set(TABLE_PRIVILEGES))
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
    out = []
    for s in sentences(text):
        # An archive table is the operator's own, named by one sweep: its INSERT is that
        # sweep's (docs/audit.md), never the role's as such.
        extra = (claimed(s) - allowed - ({"INSERT"} if "archive" in s else set())) & set(
            TABLE_PRIVILEGES
        )
        counts = re.findall(
            r"\b(one|two|three|four|five|\d) (?:table )?(?:grants|privileges)\b", s, re.I
        )
        wrong = [c for c in counts if words.get(c.lower(), int(c) if c.isdigit() else 0) != count]
        if extra or wrong:
            out.append(s)
    return out


def texts() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    deploy = [
        p
        for p in sorted((ROOT / "deploy").rglob("*"))
        if p.is_file() and p.suffix in ("", ".service", ".timer", ".yaml", ".yml", ".toml", ".py")
    ]
    return docs + deploy + [ROOT / "Dockerfile"]


def test_the_section_lists_what_the_role_needs() -> None:
    assert needed() >= {"USAGE", "SELECT", "DELETE", "pg_read_all_stats"}
    assert "UPDATE" not in needed()


@pytest.mark.parametrize("path", texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_contradicts_the_privileges_section(path: Path) -> None:
    found = contradictions(path.read_text(), needed())
    assert not found, f"{path.relative_to(ROOT)} contradicts {ANCHOR}: {found}"


@pytest.mark.parametrize("path", texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_that_advise_grants_link_to_the_section(path: Path) -> None:
    """A page that shows a GRANT for reaper, or sends the reader to grants.sql, links to the
    one page that says what the role needs (deploy files and the page itself aside)."""
    if path.suffix != ".md" or path == CANONICAL:
        return
    text = path.read_text()
    advises = [
        s
        for s in sentences(text)
        if re.search(r"\bGRANT\s+\w+.*\bTO\s+reaper\b", s)
        or ("grants.sql" in s and re.search(_NAME, s))
    ]
    if advises:
        assert ANCHOR in text, f"{path.relative_to(ROOT)} advises grants, links no {ANCHOR}"


# The family, tried: what the pages used to say, and other ways of saying it.
WRONG = [
    "The role needs `SELECT` and `DELETE` on the swept tables, and `UPDATE` on one column of "
    "each, because a batch picks its rows with `SELECT ... FOR UPDATE SKIP LOCKED`.",
    "`sql/grants.sql` grants exactly that (without the `UPDATE` grants every sweep fails with "
    '"permission denied"):',
    "| `privileges` | SELECT on every table the statement reads, DELETE on the table, UPDATE on "
    "at least one column of it (`SELECT ... FOR UPDATE SKIP LOCKED` requires it) | the GRANT |",
    "- `permission denied`: grant reaper's role what `sql/grants.sql` grants (`SELECT`, "
    "`DELETE`, and `UPDATE` on one column, which `FOR UPDATE SKIP LOCKED` requires).",
    "Custom sweeps on other tables need the same three grants on their table.",
    "Run `GRANT UPDATE (id) ON nodes TO reaper;` first.",
    "The role must be granted **INSERT** on the audit table.",
    "A sweep needs 3 privileges on its table.",
]
RIGHT = [
    "Batches take no row lock, so reaper needs **SELECT and DELETE, never UPDATE**.",
    "Nothing else: no `UPDATE` on any column, no `INSERT`, no `TRUNCATE`, no `REFERENCES`.",
    "GRANT TEMPORARY ON DATABASE control TO control_app;   -- the roles that need it",
    "Four clients refresh random live members (`UPDATE nodes SET last_seen = now()`), which "
    "needs a writer.",
    "Custom sweeps need the same two table privileges on their table, SELECT and DELETE.",
    "An administrator grants it: GRANT pg_read_all_stats TO reaper;",
]


@pytest.mark.parametrize("sentence", WRONG)
def test_the_grep_catches_contradicting_advice(sentence: str) -> None:
    assert contradictions(sentence, needed()), sentence


@pytest.mark.parametrize("sentence", RIGHT)
def test_the_grep_lets_true_advice_pass(sentence: str) -> None:
    assert not contradictions(sentence, needed()), sentence
