"""The sweeps, as data: what each one deletes, from which table, and why.

A sweep is a :class:`Sweep` value. The engine (:mod:`reaper.engine.run`) knows nothing about any
one table: it takes a sweep's table, its predicate (a SQL file under ``reaper/sql/sweeps/``
for the built-ins, a ``[sweeps.NAME]`` table of the config file for the others), the
retentions that give its cutoffs, and the sweeps that must run before it.
:func:`configured_sweeps` merges the built-ins and the declared sweeps into the one list that
run-once, the daemon and ``reaper check`` use.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from reaper import sqltext
from reaper.config.settings import did_you_mean, format_duration
from reaper.errors import ConfigError
from reaper.sqltext import predicates

# How often `reaper run` runs a sweep unless told otherwise: an hour suits retentions of days
# (a row lives at most retention + interval); ephemeral members (1 h retention, CI runners
# re-enrolling by the thousand) get a few minutes.
DEFAULT_SWEEP_INTERVAL = timedelta(hours=1)
EPHEMERAL_SWEEP_INTERVAL = timedelta(minutes=5)

if TYPE_CHECKING:
    from reaper.config.settings import Settings, SweepSettings


@dataclass(frozen=True)
class Sweep:
    """One kind of garbage.

    Attributes:
        name: unique; the ``sweep`` label of the metrics.
        table: the table it deletes from (schema-qualified allowed, e.g. ``public.nodes``).
        reason: the ``reason`` label of ``reaper_deleted_rows_total``.
        predicate: a boolean SQL expression over ``table``'s columns; it names each cutoff as
            a parameter (``%(cutoff)s``). Rows for which it holds at the moment of the delete
            are garbage. A declared sweep's predicate passed
            :func:`reaper.sqltext.predicates.check`.
        cutoffs: parameter name -> retention setting name; each cutoff is
            ``now() - retention`` by the database clock, computed once per sweep run.
        after: sweeps that must run before this one in a run that does both (foreign keys).
        description: one line for ``--help`` and the README.
        indexes: names of the indexes its batches rely on (``reaper check`` requires each to
            exist and be valid and ready). A sweep that declares none relies on the indexes
            that EXPLAIN shows its batch using; ``check`` also reports every INVALID index on
            the tables it reads.
        interval: how often ``reaper run`` runs it by default (``--interval`` and the
            ``[sweeps.NAME]`` table's ``interval`` override it).
        since: a timestamp SQL expression over ``table``'s columns: the moment a row's
            retention started counting, compared with the first cutoff (``cutoffs``' first
            parameter). ``cutoff - since`` is how far past its cutoff an eligible row is
            (``reaper_backlog_oldest_seconds``), and ``ORDER BY since`` lists the oldest
            first, so write it as a plain indexed column where possible. Empty: the sweep
            has no oldest-row gauge.
        retentions: retention name -> duration, for the names in ``cutoffs`` that are not
            settings: those a ``[sweeps.NAME]`` table gives (``sweeps.NAME.retention``, or
            ``sweeps.NAME.retention.PARAM`` for one of several cutoffs).
        enabled: False when the config disables it: it runs only when named explicitly.
        builtin: shipped with reaper (False: declared in the config file).
    """

    name: str
    table: str
    reason: str
    predicate: str
    cutoffs: Mapping[str, str]
    after: tuple[str, ...] = ()
    description: str = ""
    indexes: tuple[str, ...] = ()
    interval: timedelta = DEFAULT_SWEEP_INTERVAL
    since: str = ""
    retentions: Mapping[str, timedelta] = field(default_factory=dict)
    enabled: bool = True
    builtin: bool = False


def _builtin(
    name: str,
    table: str,
    reason: str,
    cutoffs: Mapping[str, str],
    description: str,
    indexes: tuple[str, ...],
    after: tuple[str, ...] = (),
    interval: timedelta = DEFAULT_SWEEP_INTERVAL,
) -> Sweep:
    return Sweep(
        name=name,
        table=table,
        reason=reason,
        predicate=sqltext.predicate(name),
        cutoffs=cutoffs,
        after=after,
        description=description,
        indexes=indexes,
        interval=interval,
        since=sqltext.since(name),
        builtin=True,
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
        interval=EPHEMERAL_SWEEP_INTERVAL,
    ),
    _builtin(
        "enrollment_requests",
        "enrollment_requests",
        "stale",
        {"cutoff": "node_retention"},
        "requests resolved, or pending, for more than node_retention",
        ("enrollment_requests_resolved_or_created_idx",),
    ),
    _builtin(
        "enrollment_requests_ephemeral",
        "enrollment_requests",
        "ephemeral",
        {"cutoff": "ephemeral_node_retention"},
        "requests of ephemeral tokens resolved, or pending, for more than "
        "ephemeral_node_retention",
        ("bootstrap_tokens_ephemeral_idx", "enrollment_requests_token_id_age_idx"),
        interval=EPHEMERAL_SWEEP_INTERVAL,
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
        ("bootstrap_tokens_expires_at_idx", "enrollment_requests_token_id_age_idx"),
        after=("enrollment_requests", "enrollment_requests_ephemeral"),
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
                f"unknown sweep {n!r}"
                + (did_you_mean(n, index) or f"; choose from: {', '.join(index)}")
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


# Cutoffs that left a built-in sweep for another: (sweep, cutoff) -> where it is set now.
_MOVED_CUTOFFS: Mapping[tuple[str, str], str] = {
    ("enrollment_requests", "ephemeral_cutoff"):
        "[sweeps.enrollment_requests_ephemeral] retention",
}
# Built-in sweeps whose retention may not exceed another's: (ephemeral, regular, what their
# rows are). An ephemeral member or request must not outlive a regular one (the rule that
# ephemeral_node_retention <= node_retention states for the global settings), whichever of
# the global settings and the [sweeps.NAME] tables gives each retention.
_NO_LONGER_THAN: tuple[tuple[str, str, str], ...] = (
    ("nodes_ephemeral", "nodes_silent", "member"),
    ("enrollment_requests_ephemeral", "enrollment_requests", "request"),
)
# What a [sweeps.NAME] table may change on a built-in sweep (the rest is its definition).
_DECLARATION_KEYS = ("table", "reason", "predicate", "description", "since")
_SINGLE_CUTOFF = "cutoff"
# A reason is a metric label value; kept to the built-ins' shape (stale, expired, silent).
REASON = re.compile(r"[a-z][a-z0-9_]*")


def configured_sweeps(settings: Settings) -> list[Sweep]:
    """Every sweep the configuration knows, in dependency order: the built-ins (with their
    ``[sweeps.NAME]`` overrides applied) then the sweeps the ``[sweeps.NAME]`` tables declare,
    disabled ones included (``Sweep.enabled`` says which). The one list that run-once, the
    daemon and ``reaper check`` use.

    Raises:
        ConfigError: one line naming ``[sweeps.NAME]`` and the fix: a declaration without
            ``table``, ``reason``, ``predicate`` or ``retention``, a built-in redefined, a
            retention that does not match the predicate's cutoffs, a rejected predicate
            (see :mod:`reaper.sqltext.predicates`), an unknown name in ``after``, or a cycle.
    """
    builtin_names = [s.name for s in BUILTIN_SWEEPS]
    out: list[Sweep] = []
    for sweep in BUILTIN_SWEEPS:
        overrides = settings.sweeps.get(sweep.name)
        out.append(sweep if overrides is None else _override(sweep, overrides))
    for name, body in settings.sweeps.items():
        if name not in builtin_names:
            out.append(_declared(name, body, builtin_names))
    index = by_name(out)
    for sweep in out:
        for other in sweep.after:
            if other not in index:
                raise ConfigError(
                    f"[sweeps.{sweep.name}] after: no sweep is named {other!r}; "
                    f"choose from: {', '.join(index)}"
                )
            if other == sweep.name:
                raise ConfigError(f"[sweeps.{sweep.name}] after: a sweep cannot wait on itself")
    for ephemeral, regular, rows in _NO_LONGER_THAN:
        _check_no_longer(index[ephemeral], index[regular], rows, settings)
    return dependency_order(out)


def _check_no_longer(ephemeral: Sweep, regular: Sweep, rows: str, settings: Settings) -> None:
    """Refuse an ephemeral sweep whose retention is longer than its regular sweep's."""
    mine = retention_of(ephemeral, _SINGLE_CUTOFF, settings)
    theirs = retention_of(regular, _SINGLE_CUTOFF, settings)
    if mine <= theirs:
        return

    def origin(sweep: Sweep) -> str:
        name = sweep.cutoffs[_SINGLE_CUTOFF]
        return f"[sweeps.{sweep.name}] retention" if name in sweep.retentions else name

    raise ConfigError(
        f"{origin(ephemeral)} ({format_duration(mine)}) is longer than {origin(regular)} "
        f"({format_duration(theirs)}), the retention of {regular.name}: an ephemeral "
        f"{rows} must not outlive a regular "
        f"one; shorten the first or lengthen the second"
    )


def _retention_names(
    name: str, retention: timedelta | Mapping[str, timedelta], params: Sequence[str] | None
) -> tuple[dict[str, str], dict[str, timedelta]]:
    """``(cutoffs, retentions)`` of a ``retention`` key: one duration is ``%(cutoff)s``."""
    where = f"[sweeps.{name}] retention"
    if isinstance(retention, timedelta):
        if params is not None and len(params) != 1:
            raise ConfigError(
                f"{where}: this sweep has several cutoffs ({', '.join(params)}); give a "
                "table, e.g. retention = { "
                + ", ".join(f'{p} = "30d"' for p in params) + " }"
            )
        param = params[0] if params else _SINGLE_CUTOFF
        key = f"sweeps.{name}.retention"
        return {param: key}, {key: retention}
    if params is not None:
        unknown = sorted(set(retention) - set(params))
        if unknown:
            moved = _MOVED_CUTOFFS.get((name, unknown[0]))
            raise ConfigError(
                f"{where}: this sweep has no cutoff {unknown[0]!r}; its cutoffs: "
                + ", ".join(params) + (f" ({unknown[0]} is now {moved})" if moved else "")
            )
    cutoffs = {p: f"sweeps.{name}.retention.{p}" for p in retention}
    return cutoffs, {cutoffs[p]: d for p, d in retention.items()}


def _override(sweep: Sweep, body: SweepSettings) -> Sweep:
    given = [k for k in _DECLARATION_KEYS if getattr(body, k) is not None]
    if given:
        raise ConfigError(
            f"[sweeps.{sweep.name}] redefines the built-in sweep {sweep.name!r} ({given[0]}); "
            "a built-in takes only enabled, retention, batch_size, interval, strategy, "
            "partition_action, max_eligible_fraction, max_rows_per_run, max_seconds_per_run "
            "and after: to declare a new sweep, "
            "choose another name"
        )
    cutoffs, retentions = dict(sweep.cutoffs), dict(sweep.retentions)
    if body.retention is not None:
        new_cutoffs, new_retentions = _retention_names(
            sweep.name, body.retention, list(sweep.cutoffs)
        )
        cutoffs.update(new_cutoffs)
        retentions.update(new_retentions)
    return dataclasses.replace(
        sweep,
        cutoffs=cutoffs,
        retentions=retentions,
        after=tuple(dict.fromkeys(sweep.after + body.after)),
        enabled=body.enabled,
    )


def _declared(name: str, body: SweepSettings, builtin_names: Sequence[str]) -> Sweep:
    if body.table is None:
        close = did_you_mean(name, builtin_names)
        raise ConfigError(
            f"[sweeps.{name}] has no table key and no built-in sweep has that name"
            + (close or "; a new sweep needs table, reason, predicate and retention (built-ins: "
               + ", ".join(builtin_names) + ")")
        )
    parts = body.table.split(".")
    if len(parts) > 2 or not all(parts):
        raise ConfigError(
            f"[sweeps.{name}] table: {body.table!r} is not a table name; write name or "
            "schema.name"
        )
    for key in ("reason", "predicate", "retention"):
        if getattr(body, key) is None:
            raise ConfigError(f"[sweeps.{name}] has no {key} key; a new sweep needs one")
    assert body.reason is not None and body.predicate is not None and body.retention is not None
    if not REASON.fullmatch(body.reason):
        raise ConfigError(
            f"[sweeps.{name}] reason: {body.reason!r} is not a reason label; use lower case "
            "letters, digits and _ (e.g. stale, expired)"
        )
    cutoffs, retentions = _retention_names(name, body.retention, None)
    since = ""
    if body.since is not None:
        # Checked as the predicate "since < first cutoff": the same rules (columns of the
        # table, no subquery on other tables' side effects, no function with side effects).
        first = next(iter(cutoffs))
        try:
            predicates.check(
                f"({body.since}) < %({first})s", body.table, {first}, bounded=False
            )
        except predicates.PredicateError as exc:
            raise ConfigError(
                f"[sweeps.{name}] since (checked as ({body.since}) < %({first})s) {exc}"
            ) from None
        since = body.since
    try:
        predicates.check(body.predicate, body.table, set(cutoffs))
    except predicates.PredicateError as exc:
        raise ConfigError(f"[sweeps.{name}] predicate {exc}") from None
    return Sweep(
        name=name,
        table=body.table,
        reason=body.reason,
        predicate=body.predicate,
        cutoffs=cutoffs,
        after=body.after,
        description=body.description or "",
        since=since,
        retentions=retentions,
        enabled=body.enabled,
    )


def retention_of(sweep: Sweep, param: str, settings: Settings) -> timedelta:
    """The retention behind the sweep's cutoff parameter ``param``: the sweep's own (from a
    ``[sweeps.NAME]`` table), else the named retention setting.

    Raises:
        KeyError: the sweep has no such cutoff.
        ConfigError: its retention setting does not exist.
    """
    name = sweep.cutoffs[param]
    own = sweep.retentions.get(name)
    return own if own is not None else settings.retention(name)
