"""The built-in sweeps' predicates (``sql/sweeps/<name>.sql``) as reaper's SQL parser reads
them (:mod:`reaper.sqltext.sqlinfo` and :func:`reaper.engine.partitions.key_bound`, with
pglast), kept as data: loading the configuration then loads no parser, which costs about
35 ms of every start. :func:`reaper.sqltext.declared.builtin` uses an entry only for the file
text it was made from (its SHA-256); any other text is parsed as before.

Written by ``python -m tests.unit.config.test_builtin_analysis`` (below the ``BUILTINS``
line); that test re-runs the analysis and fails when this file differs. Do not edit it by
hand.
"""

from __future__ import annotations

from typing import TypedDict


class Analysis(TypedDict):
    """One built-in's predicate, analysed over its table in a schema of its own.

    Keys:
        table: the swept table's name (its schema is the configured one).
        sha256: the digest of the predicate's text (comments removed, ``{schema}`` as is).
        ages: the expressions compared with a cutoff, as SQL text.
        columns: the swept table's columns the predicate names.
        age_columns: those of ``columns`` that ``ages`` name.
        tables_read: the swept table, then the others the predicate reads, as ``(schema,
            name)``; schema None: the swept table's.
        proof: the partition proof: ``(column, cutoff parameters)``, or why there is none.
    """

    table: str
    sha256: str
    ages: tuple[str, ...]
    columns: tuple[str, ...]
    age_columns: tuple[str, ...]
    tables_read: tuple[tuple[str | None, str], ...]
    proof: tuple[str, tuple[str, ...]] | str


BUILTINS: dict[str, Analysis] = {
    "nodes_session": {
        "table": 'nodes',
        "sha256": '99c78eda94a679c2c13d171cfa267222cc2b80839256212dacacbc18aa99640b',
        "ages": ('expires_at',),
        "columns": ('expires_at', 'banned'),
        "age_columns": ('expires_at',),
        "tables_read": ((None, 'nodes'),),
        "proof": (
            'the predicate has a NOT: only an AND of bounds of one column '
            'proves a whole partition eligible'
        ),
    },
    "nodes_silent": {
        "table": 'nodes',
        "sha256": '4b5f4ad38fbacc7a77559871952fda830e7e43f8f6f7c157637ac9f54e952d8c',
        "ages": ('enrolled_at',),
        "columns": ('expires_at', 'banned', 'ephemeral', 'enrolled_at'),
        "age_columns": ('enrolled_at',),
        "tables_read": ((None, 'nodes'),),
        "proof": 'the predicate has a condition other than column < cutoff',
    },
    "nodes_ephemeral": {
        "table": 'nodes',
        "sha256": '71abf6dde7a7060c7891278890c238925350423d82b92003009224ac3bd9cab1',
        "ages": ('enrolled_at',),
        "columns": ('expires_at', 'banned', 'ephemeral', 'enrolled_at'),
        "age_columns": ('enrolled_at',),
        "tables_read": ((None, 'nodes'),),
        "proof": 'the predicate has a condition other than column < cutoff',
    },
    "enrollment_requests_ephemeral": {
        "table": 'enrollment_requests',
        "sha256": 'fc8aa6b2a54d1868b6dc8a6180ff18a1642dd713e9dea0a1b399218e09332581',
        "ages": ('GREATEST(resolved_at, created_at)',),
        "columns": ('resolved_at', 'created_at'),
        "age_columns": ('resolved_at', 'created_at'),
        "tables_read": ((None, 'enrollment_requests'), (None, 'bootstrap_tokens')),
        "proof": 'the predicate has a condition other than a plain column < a bare cutoff',
    },
    "bootstrap_tokens": {
        "table": 'bootstrap_tokens',
        "sha256": '06285f0b0bb657eb2e18e240611339ee93d2df1768350a0745c30754084685ed',
        "ages": ('expires_at',),
        "columns": ('expires_at',),
        "age_columns": ('expires_at',),
        "tables_read": ((None, 'bootstrap_tokens'), (None, 'enrollment_requests')),
        "proof": (
            'the predicate has a NOT: only an AND of bounds of one column '
            'proves a whole partition eligible'
        ),
    },
    "router_leases": {
        "table": 'routers',
        "sha256": 'ce928e67fcc0e7327f47721fe28d690bd096e5c4bf0ff2f481a862f616b5995b',
        "ages": ('lease_expires_at',),
        "columns": ('lease_expires_at',),
        "age_columns": ('lease_expires_at',),
        "tables_read": ((None, 'routers'),),
        "proof": ('lease_expires_at', ('cutoff',)),
    },
}
