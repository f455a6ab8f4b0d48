"""The sweeps, as data: what each one deletes, from which table, and why.

A sweep is a :class:`Sweep` value. The engine (:mod:`reaper.runner`) knows nothing about any
one table: it takes a sweep's table, its predicate (a SQL file under ``reaper/sql/sweeps/``),
the retentions that give its cutoffs, and the sweeps that must run before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reaper import sqlfiles
from reaper.errors import ConfigError


@dataclass(frozen=True)
class Sweep:
    """One kind of garbage.

    Attributes:
        name: unique; the ``sweep`` label of the metrics.
        table: the table it deletes from (schema-qualified allowed, e.g. ``public.nodes``).
        reason: the ``reason`` label of ``reaper_deleted_rows_total``.
        predicate: a boolean SQL expression over ``table``'s columns; it names each cutoff as
            a parameter (``%(cutoff)s``). Rows for which it holds at the moment of the delete
            are garbage.
        cutoffs: parameter name -> retention setting name; each cutoff is
            ``now() - retention`` by the database clock, computed once per sweep run.
        after: sweeps that must run before this one in a run that does both (foreign keys).
        description: one line for ``--help`` and the README.
        indexes: names of the indexes its batches rely on (``reaper check`` requires each to
            exist and be valid and ready). A sweep that declares none relies on the indexes
            that EXPLAIN shows its batch using; ``check`` also reports every INVALID index on
            the tables it reads.
    """

    name: str
    table: str
    reason: str
    predicate: str
    cutoffs: Mapping[str, str]
    after: tuple[str, ...] = ()
    description: str = ""
    indexes: tuple[str, ...] = ()
    # Populated for sweeps declared in a config file rather than shipped with reaper.
    retentions: Mapping[str, object] = field(default_factory=dict)


def _builtin(
    name: str,
    table: str,
    reason: str,
    cutoffs: Mapping[str, str],
    description: str,
    indexes: tuple[str, ...],
    after: tuple[str, ...] = (),
) -> Sweep:
    return Sweep(
        name=name,
        table=table,
        reason=reason,
        predicate=sqlfiles.predicate(name),
        cutoffs=cutoffs,
        after=after,
        description=description,
        indexes=indexes,
    )


BUILTIN_SWEEPS: tuple[Sweep, ...] = (
    _builtin(
        "nodes_session",
        "nodes",
        "session",
        {"cutoff": "session_retention"},
        "members whose session lapsed more than session_retention ago",
        ("nodes_session_expires_at_idx",),
    ),
    _builtin(
        "nodes_silent",
        "nodes",
        "silent",
        {"cutoff": "node_retention"},
        "bootstrap members, not ephemeral, silent for more than node_retention",
        ("nodes_bootstrap_enrolled_at_idx",),
    ),
    _builtin(
        "nodes_ephemeral",
        "nodes",
        "ephemeral",
        {"cutoff": "ephemeral_node_retention"},
        "ephemeral bootstrap members silent for more than ephemeral_node_retention",
        ("nodes_bootstrap_enrolled_at_idx",),
    ),
    _builtin(
        "enrollment_requests",
        "enrollment_requests",
        "stale",
        {"cutoff": "node_retention", "ephemeral_cutoff": "ephemeral_node_retention"},
        "requests resolved, or pending, for more than the retention of their token's kind",
        (
            "enrollment_requests_resolved_at_idx",
            "enrollment_requests_created_at_idx",
            "enrollment_requests_token_id_idx",
        ),
    ),
    # After the requests: a request holds a foreign key to its token, so a token is only
    # garbage once its requests are gone.
    _builtin(
        "bootstrap_tokens",
        "bootstrap_tokens",
        "expired",
        {"cutoff": "node_retention"},
        "tokens expired more than node_retention ago that no request references",
        # The anti-join on the requests, and the foreign key check of each delete.
        ("bootstrap_tokens_expires_at_idx", "enrollment_requests_token_id_idx"),
        after=("enrollment_requests",),
    ),
    _builtin(
        "router_leases",
        "routers",
        "expired",
        {"cutoff": "node_retention"},
        "router leases expired more than node_retention ago",
        ("routers_lease_expires_at_idx",),
    ),
)


def by_name(sweeps: Iterable[Sweep]) -> dict[str, Sweep]:
    """Index sweeps by name.

    Raises:
        ConfigError: two sweeps share a name.
    """
    out: dict[str, Sweep] = {}
    for s in sweeps:
        if s.name in out:
            raise ConfigError(f"two sweeps are named {s.name!r}; sweep names must be unique")
        out[s.name] = s
    return out


def select(all_sweeps: Sequence[Sweep], names: Sequence[str]) -> list[Sweep]:
    """The sweeps called ``names`` (all of them when empty), in dependency order.

    Dependency order: every sweep comes after the sweeps in its ``after`` that are also
    selected; otherwise the declaration order holds.

    Raises:
        ConfigError: an unknown name, or a cycle in ``after``.
    """
    index = by_name(all_sweeps)
    for n in names:
        if n not in index:
            raise ConfigError(
                f"unknown sweep {n!r}; choose from: {', '.join(index)}"
            )
    chosen = [s for s in all_sweeps if not names or s.name in names]
    return dependency_order(chosen)


def dependency_order(sweeps: Sequence[Sweep]) -> list[Sweep]:
    """Sort ``sweeps`` so that each runs after those it names in ``after``.

    Stable: among sweeps free to run, the given order holds. Names in ``after`` that are not
    among ``sweeps`` are ignored (running one sweep alone is allowed).

    Raises:
        ConfigError: ``after`` forms a cycle.
    """
    present = {s.name for s in sweeps}
    placed: list[Sweep] = []
    done: set[str] = set()
    waiting = list(sweeps)
    while waiting:
        ready = next(
            (s for s in waiting if all(a in done or a not in present for a in s.after)), None
        )
        if ready is None:
            cycle = ", ".join(s.name for s in waiting)
            raise ConfigError(f"sweeps wait on each other in a cycle (after): {cycle}")
        placed.append(ready)
        done.add(ready.name)
        waiting.remove(ready)
    return placed
