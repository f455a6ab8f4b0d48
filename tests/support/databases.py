"""The shared test database: emptied before each test, its schema checked after.

See tests/conftest.py: a test on the shared database may write rows to the swept tables
(emptied before the next test) but must leave everything else as it found it.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

# The reference schema's tables (sql/schema.sql), emptied before each test.
SWEPT_TABLES = ("enrollment_requests", "bootstrap_tokens", "nodes", "routers")

# What a test could leave behind that the next one would see: relations (and their columns,
# options, privileges, indexes and their validity), functions, triggers, constraints,
# schemas, extensions, publications, and settings of the database or of a role in it.
FINGERPRINT = """
SELECT string_agg(item, E'\n' ORDER BY item) FROM (
  SELECT format('rel %s.%s:%s:%s:%s', n.nspname, c.relname, c.relkind, c.reloptions, c.relacl)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
     AND n.nspname !~ '^pg_(toast|temp|toast_temp)'
  UNION ALL
  SELECT format('col %s.%s:%s:%s:%s', a.attrelid::regclass, a.attname, a.atttypid,
                a.attnotnull, a.attacl)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
   WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('index %s:%s', i.indexrelid::regclass, i.indisvalid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
   WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('function %s', p.oid::regprocedure)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
     AND n.nspname !~ '^pg_(toast_)?temp_'
  UNION ALL
  SELECT format('trigger %s:%s', t.tgname, t.tgenabled)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('constraint %s:%s', conname, conrelid::regclass)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('schema %s:%s', nspname, nspacl) FROM pg_namespace
   WHERE nspname !~ '^pg_(toast_)?temp_'
  UNION ALL
  SELECT format('extension %s', extname) FROM pg_extension
  UNION ALL
  SELECT format('publication %s', pubname) FROM pg_publication
  UNION ALL
  SELECT format('setting %s:%s', setrole, setconfig) FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT format('database %s:%s', datacl, datallowconn) FROM pg_database
   WHERE datname = current_database()
) AS items (item)
"""


def schema_fingerprint(dsn: str) -> str:
    """Everything in ``dsn``'s database but the rows, as one text (see FINGERPRINT)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


def empty_swept_tables(dsn: str) -> None:
    """Empty every swept table and restart its identity (a few milliseconds)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in SWEPT_TABLES)
            )
        )


def fingerprint_changes(before: str, after: str) -> list[str]:
    """What differs between two fingerprints: items gone (-) and items new (+)."""
    old, new = set(before.splitlines()), set(after.splitlines())
    return [f"-{x}" for x in sorted(old - new)] + [f"+{x}" for x in sorted(new - old)]
