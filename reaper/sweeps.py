"""The sweeps, as data: what each one deletes, from which table, and why.

A sweep is a :class:`Sweep` value. The engine (:mod:`reaper.runner`) knows nothing about any
one table: it takes a sweep's table, its predicate (a SQL file under ``reaper/sql/sweeps/``),
the retentions that give its cutoffs, and the sweeps that must run before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from reaper import sqlfiles
from reaper.errors import ConfigError

# How often `reaper run` runs a sweep unless told otherwise: an hour suits retentions of days
# (a row lives at most retention + interval); ephemeral members (1 h retention, CI runners
# re-enrolling by the thousand) get a few minutes.
DEFAULT_SWEEP_INTERVAL = timedelta(hours=1)
EPHEMERAL_SWEEP_INTERVAL = timedelta(minutes=5)


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
        interval: how often ``reaper run`` runs it by default (``--interval`` and the
            ``[sweeps.NAME]`` table's ``interval`` override it).
        since: a timestamp SQL expression over ``table``'s columns: the moment a row's
            retention started counting, compared with the first cutoff (``cutoffs``' first
            parameter). ``cutoff - since`` is how far past its cutoff an eligible row is
            (``reaper_backlog_oldest_seconds``), and ``ORDER BY since`` lists the oldest
            first, so write it as a plain indexed column where possible. Empty: the sweep
            has no oldest-row gauge.
    """

    name: str
    table: str
    reason: str
    predicate: str
    cutoffs: Mapping[str, str]
    after: tuple[str, ...] = ()
    description: str = ""
    interval: timedelta = DEFAULT_SWEEP_INTERVAL
    since: str = ""
    # Populated for sweeps declared in a config file rather than shipped with reaper.
    retentions: Mapping[str, object] = field(default_factory=dict)


def _builtin(
    name: str,
    table: str,
    reason: str,
    cutoffs: Mapping[str, str],
    description: str,
    after: tuple[str, ...] = (),
    interval: timedelta = DEFAULT_SWEEP_INTERVAL,
) -> Sweep:
    return Sweep(
        name=name,
        table=table,
        reason=reason,
        predicate=sqlfiles.predicate(name),
        cutoffs=cutoffs,
        after=after,
        description=description,
        interval=interval,
        since=sqlfiles.since(name),
    )


BUILTIN_SWEEPS: tuple[Sweep, ...] = (
    _builtin(
        "nodes_session",
        "nodes",
        "session",
        {"cutoff": "session_retention"},
        "members whose session lapsed more than session_retention ago",
    ),
    _builtin(
        "nodes_silent",
        "nodes",
        "silent",
        {"cutoff": "node_retention"},
        "bootstrap members, not ephemeral, silent for more than node_retention",
    ),
    _builtin(
        "nodes_ephemeral",
        "nodes",
        "ephemeral",
        {"cutoff": "ephemeral_node_retention"},
        "ephemeral bootstrap members silent for more than ephemeral_node_retention",
        interval=EPHEMERAL_SWEEP_INTERVAL,
    ),
    _builtin(
        "enrollment_requests",
        "enrollment_requests",
        "stale",
        {"cutoff": "node_retention", "ephemeral_cutoff": "ephemeral_node_retention"},
        "requests resolved, or pending, for more than the retention of their token's kind",
    ),
    # After the requests: a request holds a foreign key to its token, so a token is only
    # garbage once its requests are gone.
    _builtin(
        "bootstrap_tokens",
        "bootstrap_tokens",
        "expired",
        {"cutoff": "node_retention"},
        "tokens expired more than node_retention ago that no request references",
        after=("enrollment_requests",),
    ),
    _builtin(
        "router_leases",
        "routers",
        "expired",
        {"cutoff": "node_retention"},
        "router leases expired more than node_retention ago",
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
