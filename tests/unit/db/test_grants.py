"""The reaper role of grants.sql: least privilege, really.

grants.sql runs as the tables' owner (no superuser), twice (it converges, and takes back what an
older version granted); every reaper command then runs as the role; and every statement that
changes data other than by DELETE, or creates anything, is refused. ``reaper check`` warns about
a superuser, a table owner, and a role that can still create temporary tables.
"""

from __future__ import annotations

import re

from reaper import sqltext


def test_no_engine_statement_locks_rows_for_update() -> None:
    """FOR UPDATE (and FOR NO KEY UPDATE) needs UPDATE: no statement reaper runs takes it, so
    the role needs none, and `reaper check` asks for none."""
    for name in sqltext.all_files():
        text = sqltext.strip_comments(sqltext.read(name))
        assert not re.search(r"\bFOR\s+(NO\s+KEY\s+)?UPDATE\b", text, re.IGNORECASE), name
