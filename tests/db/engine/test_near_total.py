"""Near-total deletes, on a real PostgreSQL.

- A batch's foreign-key checks keep the server's cached plan (plan_cache_mode back to
  auto inside the batch), while the session's own pin stays force_custom_plan.
"""

from __future__ import annotations

from psycopg import sql

from reaper import sqltext
from reaper.db import Database


def test_foreign_key_checks_keep_their_cached_plan_in_a_batch(database: Database) -> None:
    with database.session() as session:
        conn = session._conn
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_custom_plan",)
        with conn.transaction(force_rollback=True):
            conn.execute(sql.SQL(sqltext.engine("batch_settings")),  # type: ignore[arg-type]
                         {"lock_timeout_ms": 5, "heap_walk": False})
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_custom_plan",)
