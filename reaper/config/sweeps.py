"""The sweeps, as data: what each one deletes, from which table, why, and how.

A sweep is a :class:`Sweep` value, resolved once at load by :func:`configured_sweeps` from the
settings and the ``[sweeps.NAME]`` tables: its cutoffs' retentions, batch size, strategy,
partition action, interlock fraction, budget and interval are typed fields, so the engine and
the daemon never look a value up by a setting's name. The engine (:mod:`reaper.engine`) knows
nothing about any one table: it takes a sweep's table, its predicate (composed by
:mod:`reaper.sqltext.declared`: from the reviewed SQL files under ``reaper/sql/sweeps/`` for
the built-ins, or a declaration of their own (:attr:`Builtin.rule`), from the data of a
``[sweeps.NAME]`` table for the others; no SQL text of a config file reaches the server),
its retentions and the sweeps that must run before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypedDict, TypeVar

from reaper.config.declarations import PerSweep, Settings
from reaper.config.declare import declaration, legacy_message, split_table
from reaper.config.schedule import Cron, Window
from reaper.config.setting import Setting
from reaper.config.settings import SweepSettings, builtin_keys, sweep_keys
from reaper.config.values import did_you_mean, format_duration
from reaper.errors import ConfigError
from reaper.sqltext import declared
from reaper.sqltext.declared import Predicate
from reaper.sqltext.names import TableName
from reaper.vocab import PartitionAction

# How often `reaper run` runs a sweep unless told otherwise: an hour suits retentions of days
# (a row lives at most retention + interval); ephemeral members (1 h retention, CI runners
# re-enrolling by the thousand) get a few minutes.
DEFAULT_SWEEP_INTERVAL = timedelta(hours=1)
EPHEMERAL_SWEEP_INTERVAL = timedelta(minutes=5)


@dataclass(frozen=True)
class Budget:
    """When a run stops with work left: after ``max_rows`` rows or ``max_seconds`` seconds,
    or ``window_seconds`` after it started, when its maintenance window closes.

    The batch in flight always finishes; None means no limit.
    """

    max_rows: int | None = None
    max_seconds: float | None = None
    # Seconds from the run's start until its window closes (the daemon sets it per run).
    window_seconds: float | None = None


T = TypeVar("T")


@dataclass(frozen=True)
class Sweep(PerSweep):
    """One kind of garbage, fully resolved.

    Each per-sweep setting (:class:`reaper.config.declarations.PerSweep`, e.g. ``batch_size``)
    is an attribute too: this sweep's own value, else the global one (``knobs`` holds them).

    Attributes:
        name: unique; the ``sweep`` label of the metrics.
        table: the table it deletes from, with its schema (shown without it in ``public``).
        reason: the ``reason`` label of ``reaper_deleted_rows_total``.
        predicate: its eligibility predicate, composed (:mod:`reaper.sqltext.declared`), with
            each cutoff a named parameter; its ``since`` is the backlog gauge's age (None: no
            oldest-row gauge). Rows for which it holds at the moment of the delete are
            garbage.
        retentions: cutoff parameter name -> retention; each cutoff is ``now() - retention``
            by the database clock, computed once per sweep run.
        after: sweeps that must run before this one in a run that does both (foreign keys).
        description: one line for ``--help`` and the README.
        indexes: names of the indexes its batches rely on (``reaper check`` requires each to
            exist and be valid and ready). A sweep that declares none relies on the indexes
            that EXPLAIN shows its batch using; ``check`` also reports every INVALID index on
            the tables it reads.
        interval: how often ``reaper run`` runs it (unless ``schedule`` is set).
        schedule: the cron schedule ``reaper run`` runs it on (None: every ``interval``).
        window: the daily window outside which no run of it starts (None: any time).
        enabled: False when the config disables it: it runs only when named explicitly.
        builtin: shipped with reaper (False: declared in the config file).
        key: the columns that name a deleted row in its batch's ``batch_keys`` line (empty:
            the table's primary key).
        archive: the table each batch inserts the rows it deletes into, in the statement that
            deletes them (None: none).
        archive_file: an absolute path, or ``-`` (standard output), that each batch writes
            its deleted rows to as JSON lines before its COMMIT (None: none).
        knobs: the per-sweep settings' values, by name; one left out is its default.
    """

    name: str
    table: TableName
    reason: str
    predicate: Predicate
    retentions: Mapping[str, timedelta]
    after: tuple[str, ...] = ()
    description: str = ""
    indexes: tuple[str, ...] = ()
    interval: timedelta = DEFAULT_SWEEP_INTERVAL
    schedule: Cron | None = None
    window: Window | None = None
    enabled: bool = True
    builtin: bool = False
    key: tuple[str, ...] = ()
    archive: TableName | None = None
    archive_file: str | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.table, TableName):
            raise TypeError(f"a sweep's table is a TableName (schema and name), not {self.table!r}")
        if self.archive is not None and not isinstance(self.archive, TableName):
            raise TypeError(f"an archive is a TableName (schema and name), not {self.archive!r}")

    def setting_value(self, setting: Setting[T]) -> T:
        value: T = self.knobs.get(setting.name, setting.default)
        return value

    @property
    def budget(self) -> Budget:
        """When one run stops with work left."""
        seconds = self.max_seconds_per_run
        return Budget(self.max_rows_per_run, seconds.total_seconds() if seconds else None)

    @property
    def cutoffs(self) -> tuple[str, ...]:
        """Its cutoff parameter names, in order."""
        return tuple(self.retentions)

    @property
    def since(self) -> bool:
        """Whether it has an oldest-row gauge (a ``since`` age)."""
        return self.predicate.since is not None


@dataclass(frozen=True)
class Builtin:
    """A sweep shipped with reaper, before the settings resolve it.

    Attributes:
        retention_settings: cutoff parameter -> the retention setting that gives it (a field
            of :class:`Settings`, e.g. ``node_retention``).
        interval: its default interval (``--interval`` and ``[sweeps.NAME] interval`` win).
        rule: its predicate as a declaration, compiled like a ``[sweeps.NAME]`` table's
            (:func:`reaper.sqltext.declared.compile_declaration`, its cutoff the single
            retention's); None: the SQL files of the package, reviewed with its code
            (``sql/sweeps/<name>.sql``, ``sql/since/<name>.sql``).
        The others: as :class:`Sweep`'s.
    """

    name: str
    table: str
    reason: str
    retention_settings: Mapping[str, str]
    description: str
    indexes: tuple[str, ...]
    after: tuple[str, ...] = ()
    interval: timedelta = DEFAULT_SWEEP_INTERVAL
    rule: declared.Rule | None = None


BUILTINS: tuple[Builtin, ...] = (
    Builtin(
        "nodes_session",
        "nodes",
        "session",
        {"cutoff": "session_retention"},
        "members whose session lapsed more than session_retention ago",
        ("nodes_session_expires_at_idx",),
    ),
    Builtin(
        "nodes_silent",
        "nodes",
        "silent",
        {"cutoff": "node_retention"},
        "bootstrap members, not ephemeral, silent for more than node_retention",
        ("nodes_bootstrap_enrolled_at_idx",),
    ),
    Builtin(
        "nodes_ephemeral",
        "nodes",
        "ephemeral",
        {"cutoff": "ephemeral_node_retention"},
        "ephemeral bootstrap members silent for more than ephemeral_node_retention",
        ("nodes_bootstrap_enrolled_at_idx",),
        interval=EPHEMERAL_SWEEP_INTERVAL,
    ),
    # Resolved before the cutoff, or still pending and created before it, whatever the
    # token: resolved_at < cutoff OR (resolved_at IS NULL AND created_at < cutoff), two
    # disjoint arms, each an ordered range of its own index (resolved_at; created_at of the
    # pending requests). Requests of ephemeral tokens go sooner, by their own sweep; one still
    # here past this cutoff is eligible for both, and whichever runs first deletes it.
    # Excluding them here would cost every row a look at its token: an anti-join that made a
    # heap walk's batch take 30-90% longer (10,000 rows, 100,000 tokens).
    Builtin(
        "enrollment_requests",
        "enrollment_requests",
        "stale",
        {"cutoff": "node_retention"},
        "requests resolved, or pending, for more than node_retention",
        ("enrollment_requests_resolved_at_idx", "enrollment_requests_pending_created_at_idx"),
        rule=declared.Rule(age=("resolved_at", "created_at")),
    ),
    Builtin(
        "enrollment_requests_ephemeral",
        "enrollment_requests",
        "ephemeral",
        {"cutoff": "ephemeral_node_retention"},
        "requests of ephemeral tokens resolved, or pending, for more than ephemeral_node_retention",
        ("bootstrap_tokens_ephemeral_idx", "enrollment_requests_token_id_age_idx"),
        interval=EPHEMERAL_SWEEP_INTERVAL,
    ),
    # After the requests: a request holds a foreign key to its token, so a token is only
    # garbage once its requests are gone.
    Builtin(
        "bootstrap_tokens",
        "bootstrap_tokens",
        "expired",
        {"cutoff": "node_retention"},
        "tokens expired more than node_retention ago that no request references",
        # The anti-join on the requests, and the foreign key check of each delete.
        ("bootstrap_tokens_expires_at_idx", "enrollment_requests_token_id_age_idx"),
        after=("enrollment_requests", "enrollment_requests_ephemeral"),
    ),
    Builtin(
        "router_leases",
        "routers",
        "expired",
        {"cutoff": "node_retention"},
        "router leases expired more than node_retention ago",
        ("routers_lease_expires_at_idx",),
    ),
)
BUILTIN_NAMES: tuple[str, ...] = tuple(b.name for b in BUILTINS)


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
    ("enrollment_requests", "ephemeral_cutoff"): "[sweeps.enrollment_requests_ephemeral] retention",
}
# Built-in sweeps whose retention may not exceed another's: (ephemeral, regular, what their
# rows are). An ephemeral member or request must not outlive a regular one (the rule that
# ephemeral_node_retention <= node_retention states for the global settings), whichever of
# the global settings and the [sweeps.NAME] tables gives each retention.
_NO_LONGER_THAN: tuple[tuple[str, str, str], ...] = (
    ("nodes_ephemeral", "nodes_silent", "member"),
    ("enrollment_requests_ephemeral", "enrollment_requests", "request"),
)
_SINGLE_CUTOFF = "cutoff"
# A reason is a metric label value; kept to the built-ins' shape (stale, expired, silent).
REASON = re.compile(r"[a-z][a-z0-9_]*")


def configured_sweeps(settings: Settings) -> list[Sweep]:
    """Every sweep the configuration knows, resolved, in dependency order: the built-ins
    (with their ``[sweeps.NAME]`` overrides applied) then the sweeps the ``[sweeps.NAME]``
    tables declare, disabled ones included (``Sweep.enabled`` says which). Called once per
    load (:func:`reaper.config.load.load_config`); run-once, the daemon and ``reaper check``
    use its list.

    Raises:
        ConfigError: one line naming ``[sweeps.NAME]`` and the fix: a declaration without
            ``table`` or ``reason``, a declaration that is not one (see
            :mod:`reaper.config.declare`: SQL text, a catalog table, a rule without ``age`` or
            ``retention``), a built-in redefined, an unknown name in ``after``, or a cycle.
    """
    out = [_builtin(b, settings) for b in BUILTINS]
    for name, body in settings.sweeps.items():
        if name not in BUILTIN_NAMES:
            out.append(_declared(name, body, settings))
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


def _retention_named(sweep: Sweep, settings: Settings) -> str:
    """A built-in sweep's single retention as an error names it: its ``[sweeps.NAME]``
    key, or the setting that gives it, where that was given, with its value."""
    own = settings.sweeps.get(sweep.name)
    if own is not None and own.retention is not None:
        retention = format_duration(sweep.retentions[_SINGLE_CUTOFF])
        return f"[sweeps.{sweep.name}] retention ({retention})"
    builtin = next(b for b in BUILTINS if b.name == sweep.name)
    return settings.described(builtin.retention_settings[_SINGLE_CUTOFF])


def _check_no_longer(ephemeral: Sweep, regular: Sweep, rows: str, settings: Settings) -> None:
    """Refuse an ephemeral sweep whose retention is longer than its regular sweep's."""
    if ephemeral.retentions[_SINGLE_CUTOFF] <= regular.retentions[_SINGLE_CUTOFF]:
        return
    raise ConfigError(
        f"{_retention_named(ephemeral, settings)} is longer than "
        f"{_retention_named(regular, settings)}, the retention of {regular.name}: an "
        f"ephemeral {rows} must not outlive a regular one; shorten the first or lengthen the "
        "second"
    )


def _own_retentions(
    name: str, retention: timedelta | Mapping[str, timedelta], params: Sequence[str] | None
) -> dict[str, timedelta]:
    """Cutoff parameter -> retention of a built-in's ``retention`` key: one duration is its
    single cutoff's; ``params``: the sweep's cutoffs (None: any name)."""
    where = f"[sweeps.{name}] retention"
    if isinstance(retention, timedelta):
        if params is not None and len(params) != 1:
            raise ConfigError(
                f"{where}: this sweep has several cutoffs ({', '.join(params)}); give a "
                "table, e.g. retention = { " + ", ".join(f'{p} = "30d"' for p in params) + " }"
            )
        return {params[0] if params else _SINGLE_CUTOFF: retention}
    if params is not None:
        unknown = sorted(set(retention) - set(params))
        if unknown:
            moved = _MOVED_CUTOFFS.get((name, unknown[0]))
            raise ConfigError(
                f"{where}: this sweep has no cutoff {unknown[0]!r}; its cutoffs: "
                + ", ".join(params)
                + (f" ({unknown[0]} is now {moved})" if moved else "")
            )
    return dict(retention)


class _Resolved(TypedDict):
    schedule: Cron | None
    window: Window | None
    enabled: bool
    archive: TableName | None
    archive_file: str | None
    knobs: dict[str, Any]


def _timing(
    name: str, body: SweepSettings, settings: Settings
) -> tuple[Cron | None, Window | None]:
    """A sweep's cron schedule and window: its own, else the global ones. Its own interval
    wins over a global schedule (and its own schedule over a global interval).

    Raises:
        ConfigError: its table sets both interval and schedule.
    """
    own = body.own
    if own.get("schedule") is not None and own.get("interval") is not None:
        raise ConfigError(
            f"[sweeps.{name}] sets both interval ({format_duration(own['interval'])}) and "
            f"schedule ({own['schedule']}); give one: the schedule runs it at its times, the "
            "interval every so long"
        )
    zone = own.get("schedule_time_zone") or settings.schedule_time_zone
    expression = own.get("schedule") or (
        None if own.get("interval") is not None else settings.schedule
    )
    window = own.get("window")
    window = settings.window if window is None else window
    if not isinstance(window, tuple):
        window = None  # "any": this sweep runs at any time, whatever the global window
    return (
        None if expression is None else Cron(expression, zone),
        None if window is None else Window(window[0], window[1], zone),
    )


def _interval(body: SweepSettings, settings: Settings, default: timedelta) -> timedelta:
    """How often the daemon runs a sweep: its own interval, the global one, else ``default``."""
    own: timedelta | None = body.own.get("interval")
    return own or settings.interval or default


def _resolved(name: str, table: TableName, body: SweepSettings, settings: Settings) -> _Resolved:
    """What a ``[sweeps.NAME]`` table may set on any sweep: each per-sweep setting its own
    value, else the global setting's; its schedule and window; its archive.

    A sweep with an archive retires no partition unless its own ``partition_action`` says
    detach: a dropped partition's rows would be deleted without passing through the archive.
    """
    knobs = {
        s.name: body.own.get(s.name, getattr(settings, s.name)) for s in PerSweep.declarations()
    }
    schedule, window = _timing(name, body, settings)
    archive = None
    if body.archive is not None:
        archive = TableName(*split_table(f"[sweeps.{name}]", body.archive, "archive"))
        if archive.regclass == table.regclass:
            raise ConfigError(
                f"[sweeps.{name}] archive: {archive} is the swept table itself; name another "
                "table, with the same columns (CREATE TABLE ... (LIKE ...))"
            )
    own_action = body.own.get("partition_action")
    if archive is not None or body.archive_file is not None:
        if own_action == PartitionAction.DROP:
            raise ConfigError(
                f"[sweeps.{name}] partition_action: drop would delete a partition's rows "
                "without archiving them; remove it (a sweep with an archive deletes every row "
                "in its batches) or set detach"
            )
        if own_action is None:
            knobs["partition_action"] = PartitionAction.OFF
    return {
        "schedule": schedule,
        "window": window,
        "enabled": body.enabled,
        "archive": archive,
        "archive_file": body.archive_file,
        "knobs": knobs,
    }


def _builtin(builtin: Builtin, settings: Settings) -> Sweep:
    body = settings.sweeps.get(builtin.name) or SweepSettings()
    allowed = builtin_keys()
    given = [k for k in sweep_keys() if k not in allowed and getattr(body, k, None) is not None]
    if given:
        raise ConfigError(
            f"[sweeps.{builtin.name}] redefines the built-in sweep {builtin.name!r} "
            f"({given[0]}); a built-in takes only {', '.join(allowed[:-1])} and "
            f"{allowed[-1]}: to declare a new sweep, choose another name"
        )
    retentions: dict[str, timedelta] = {
        param: getattr(settings, setting) for param, setting in builtin.retention_settings.items()
    }
    if body.retention is not None:
        retentions.update(
            _own_retentions(builtin.name, body.retention, list(builtin.retention_settings))
        )
    table = TableName(settings.schema, builtin.table)
    cutoffs = tuple(builtin.retention_settings)
    predicate = (
        declared.builtin(builtin.name, table, cutoffs)
        if builtin.rule is None
        else declared.compile_declaration(
            table.schema, table.name, (builtin.rule,), cutoffs=cutoffs
        )
    )
    return Sweep(
        name=builtin.name,
        table=table,
        reason=builtin.reason,
        predicate=predicate,
        retentions=retentions,
        after=tuple(dict.fromkeys(builtin.after + body.after)),
        description=builtin.description,
        indexes=builtin.indexes,
        interval=_interval(body, settings, builtin.interval),
        builtin=True,
        **_resolved(builtin.name, table, body, settings),
    )


def _declared(name: str, body: SweepSettings, settings: Settings) -> Sweep:
    if body.table is None:
        close = did_you_mean(name, BUILTIN_NAMES)
        raise ConfigError(
            f"[sweeps.{name}] has no table key and no built-in sweep has that name"
            + (
                close
                or "; a new sweep needs table, reason, age and retention (built-ins: "
                + ", ".join(BUILTIN_NAMES)
                + ")"
            )
        )
    if body.predicate is not None or body.since is not None:
        raise ConfigError(legacy_message(name, body))
    if body.reason is None:
        raise ConfigError(f"[sweeps.{name}] has no reason key; a new sweep needs one")
    if not REASON.fullmatch(body.reason):
        raise ConfigError(
            f"[sweeps.{name}] reason: {body.reason!r} is not a reason label; use lower case "
            "letters, digits and _ (e.g. stale, expired)"
        )
    predicate, retentions = declaration(name, body)
    return Sweep(
        name=name,
        table=predicate.table,
        reason=body.reason,
        predicate=predicate,
        retentions=retentions,
        after=body.after,
        description=body.description or "",
        interval=_interval(body, settings, DEFAULT_SWEEP_INTERVAL),
        key=body.key or (),
        **_resolved(name, predicate.table, body, settings),
    )
