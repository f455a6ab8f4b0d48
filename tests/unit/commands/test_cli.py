"""``reaper run-once`` through the real entry point, in a subprocess, as a user runs it.

Bad input gives exactly one line on stderr and exit code 2 (1 when the database cannot be
reached); ``--json`` prints one object per sweep; ``--dry-run`` deletes nothing and reports
the eligible rows; a password in the DSN appears nowhere; and a run over the demo's mix of
rows removes every garbage-* row and keeps every keep-* row.
"""

from __future__ import annotations


def test_an_error_with_brackets_is_printed_as_it_is(capsys) -> None:
    """A database's error text is not rich markup: "[/]" or "[bold]" in it must neither crash
    the table nor vanish from it."""
    from reaper.commands.render import print_results
    from reaper.engine.result import SweepResult

    error = 'syntax error at or near "[/]" in ARRAY[1] [bold]'
    print_results(
        [SweepResult("custom[x]", "t", "why", outcome="failure", error=error)], dry_run=False
    )
    out = capsys.readouterr().out
    assert error in out
    assert "custom[x]" in out
