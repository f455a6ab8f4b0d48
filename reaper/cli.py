"""The command line: ``reaper run-once`` (and the commands that build on it).

Every setting of :class:`reaper.settings.Settings` is a flag on each command, with its
``REAPER_*`` environment variable; flags and variables win over the TOML file (``--config``),
which wins over the defaults. Exit codes: 0 every sweep succeeded (3: run-once found every
sweep's lock held by another session, so nothing ran), 1 a sweep (or the
database) failed, 2 bad usage or configuration, always with one line on stderr.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import structlog
from prometheus_client import REGISTRY, CollectorRegistry
from rich.console import Console
from rich.text import Text

from reaper import __version__, checks, errors, indexes, log, render, status
from reaper.db import Database, dsn_has_password
from reaper.metrics import Metrics
from reaper.progress import SweepProgress
from reaper.runner import (
    FAILURE,
    SKIPPED,
    SweepResult,
    check_predicates,
    refuse_unsweepable,
    run_sweep,
)
from reaper.settings import (
    SETTING_FIELDS,
    Settings,
    build_settings,
    format_duration,
    load_toml,
    reload_settings,
)
from reaper.sweeps import BUILTIN_SWEEPS, Sweep, configured_sweeps, select

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# run-once: every sweep it was asked to run was skipped, its lock held by another session.
EXIT_ALL_SKIPPED = 3
ENV_PREFIX = "REAPER"


def _envvar(name: str) -> str:
    return f"{ENV_PREFIX}_{name.upper()}"


def _default_text(value: Any) -> str:
    from datetime import timedelta

    if isinstance(value, timedelta):
        return format_duration(value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add one option per setting, plus ``--config``. Values stay raw strings (None when not
    given) so that :func:`build_settings` parses every source the same way."""
    defaults = Settings()
    for f in reversed(SETTING_FIELDS):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata['help']} [default: {_default_text(getattr(defaults, f.name))}]"
        # A boolean setting given alone (`--strict`) means true; `--strict false` also works.
        common: dict[str, Any] = {
            "default": None,
            "envvar": _envvar(f.name),
            "show_envvar": True,
            "metavar": f.metadata.get("metavar") or "[BOOL]",
            "help": help_text,
        }
        if f.metadata.get("metavar") is None:
            common.update(is_flag=False, flag_value="true")
        fn = click.option(flag, f.name, **common)(fn)
    fn = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=_envvar("config"),
        show_envvar=True,
        help="TOML file of settings (keys as the flags, with _), and [sweeps.NAME] tables.",
    )(fn)
    return fn


def load_settings(config_path: Path | None, raw: dict[str, Any]) -> Settings:
    """Settings from the flags/env values in ``raw`` over the TOML file at ``config_path``.

    Raises:
        ConfigError: anything invalid, in one line.
    """
    explicit = {k: v for k, v in raw.items() if v is not None}
    file_values = load_toml(config_path) if config_path else {}
    # A bad value from the environment is reported under the variable's name, not the flag's.
    ctx = click.get_current_context(silent=True)
    labels = {
        name: _envvar(name)
        for name in explicit
        if ctx is not None
        and ctx.get_parameter_source(name) == click.core.ParameterSource.ENVIRONMENT
    }
    settings = build_settings(
        explicit, file_values, source=str(config_path or "config"), labels=labels
    )
    global _dsn_on_command_line
    _dsn_on_command_line = ctx is not None and "dsn" in explicit and \
        ctx.get_parameter_source("dsn") == click.core.ParameterSource.COMMANDLINE
    return settings


# Set by load_settings: the DSN came from a flag, which every local user can read in `ps`.
_dsn_on_command_line = False
_password_warned = False


def warn_if_password_on_command_line(settings: Settings) -> None:
    """Once per process: a warning on stderr when ``--dsn`` on the command line holds a
    password (visible in ``ps`` and ``/proc/PID/cmdline``), naming the fix."""
    global _password_warned
    if _password_warned or not _dsn_on_command_line or not dsn_has_password(settings.dsn):
        return
    _password_warned = True
    structlog.get_logger("reaper.cli").warning(
        "password_on_command_line",
        setting="--dsn",
        fix="every local user can read it in ps; put the password in a password file "
        "(PGPASSFILE) or the DSN in REAPER_DSN or a service file (docs/security.md)",
    )


def open_database(settings: Settings) -> Database:
    """A :class:`Database` configured from ``settings`` (not yet connected)."""
    db = Database.from_settings(settings)
    warn_if_password_on_command_line(settings)
    return db


def enabled_sweeps(settings: Settings, names: Sequence[str]) -> list[Sweep]:
    """The sweeps to run: the built-in and declared ones named (all when none), minus those
    the config disables (a sweep named explicitly runs even when disabled), in dependency
    order. See :func:`reaper.sweeps.configured_sweeps`.

    Raises:
        ConfigError: an unknown sweep name in ``names``, or a bad ``[sweeps.NAME]`` table.
    """
    chosen = select(configured_sweeps(settings), names)
    if names:
        return chosen
    return [s for s in chosen if s.enabled]


_WIDE_OPTION = click.option(
    "--wide", is_flag=True,
    help="Every column of the table, stacked one block per row when they do not fit the "
    "terminal (by default, columns are left out to fit).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="reaper")
@click.option(
    "--log-level",
    type=click.Choice(log.LEVELS),
    default="info",
    envvar=_envvar("log_level"),
    show_envvar=True,
    show_default=True,
    help="Lowest level logged (to stderr).",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    envvar=_envvar("log_format"),
    show_envvar=True,
    show_default=True,
    help="auto: console lines on a terminal, JSON lines otherwise.",
)
def cli(log_level: str, log_format: str) -> None:
    """reaper keeps a control plane's PostgreSQL tables bounded: it deletes what the retention
    rules say is garbage, in short index-served batches, and counts what it removed."""
    log.configure(log_level, None if log_format == "auto" else log_format == "json")


@cli.command("run-once")
@click.option(
    "--sweep",
    "sweep_names",
    multiple=True,
    metavar="NAME",
    help="Run only this sweep (repeatable), even when the config disables it. Default: every "
    "enabled sweep. Built-in names: "
    + ", ".join(s.name for s in BUILTIN_SWEEPS)
    + ", and those the config's [sweeps.NAME] tables declare.",
)
@click.option("--dry-run", is_flag=True, help="Count the eligible rows; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@_WIDE_OPTION
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False, path_type=Path),
    callback=lambda ctx, param, value: _writable_file(value),
    help="Write the metrics here in the Prometheus text format (atomically), for "
    "node_exporter's textfile collector.",
)
@settings_options
def run_once(
    sweep_names: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    wide: bool,
    metrics_file: Path | None,
    config_path: Path | None,
    **raw: Any,
) -> None:
    """Run the sweeps once, in dependency order, and print one row per sweep.

    Exit code 0 when every sweep succeeded, 1 when any failed, 2 for bad usage, 3 when every
    sweep was skipped because another session holds its advisory lock (each holder is named).
    """
    settings = load_settings(config_path, raw)
    sweeps = enabled_sweeps(settings, sweep_names)
    db = open_database(settings)
    db.check_connection()
    if not dry_run:
        # The sweeps' advisory locks must hold (not behind a transaction-pooling proxy).
        db.check_advisory_locks()
    metrics = Metrics(sweeps, CollectorRegistry())
    with db:
        if report_missing_tables(db, sweeps, settings):
            sys.exit(EXIT_FAILED)
        with db.session() as session:
            refuse_unsweepable(session, sweeps)
        check_predicates(db, sweeps)
        if settings.strict:
            _refuse_on_failed_checks(db, sweeps, settings, metrics)
        live = sys.stderr.isatty() and not as_json and not dry_run
        results = []
        with SweepProgress(live=live) as progress:
            for sweep in sweeps:
                progress.start(sweep.name, None if dry_run else _estimate(db, sweep, settings))
                result = run_sweep(
                    db, sweep, settings, metrics=metrics, dry_run=dry_run,
                    on_batch=progress.batch,
                )
                progress.finish(result)
                results.append(result)
        metrics_written = True
        if metrics_file is not None:
            _refresh_storage_rows(db, metrics, sweeps)
            metrics_written = _write_metrics(metrics, metrics_file)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print_results(results, dry_run=dry_run, wide=wide, sweeps=sweeps)
    failed = any(r.outcome == FAILURE for r in results) or not metrics_written
    if failed:
        sys.exit(EXIT_FAILED)
    # Nothing ran at all: a squatter on the lock keys must not look like a clean run.
    sys.exit(EXIT_ALL_SKIPPED if results and all(r.outcome == SKIPPED for r in results)
             else EXIT_OK)


def _writable_file(path: Path | None) -> Path | None:
    """``path`` when a file can be created there (checked before any sweep runs).

    Raises:
        click.BadParameter: its directory is missing or not writable (exit 2, one line).
    """
    if path is None:
        return None
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(
            f"cannot create {path}: {parent} is not a writable directory",
            param_hint="'--metrics-file'",
        )
    return path


def _write_metrics(metrics: Metrics, path: Path) -> bool:
    """Write the textfile; a failure (disk full, say) is logged, not a traceback."""
    try:
        metrics.write_textfile(path)
        return True
    except OSError as exc:
        structlog.get_logger("reaper.cli").error(
            "metrics_file_failed", path=str(path), error=exc.strerror or str(exc)
        )
        return False


def _estimate(db: Database, sweep: Sweep, settings: Settings) -> int | None:
    """The sweep's backlog for its progress bar, as ``reaper status`` counts it (None when the
    count fails: the sweep itself reports why)."""
    try:
        with db.session() as session:
            rows, _ = status.backlog(session, sweep, settings, status.DEFAULT_BACKLOG_CAP)
            return rows
    except errors.ReaperError:
        return None


def report_missing_tables(db: Database, sweeps: Sequence[Sweep], settings: Settings) -> bool:
    """Say once which database reaper reached when swept tables are missing from it, rather
    than one "does not exist" per sweep that never names the database. None of the tables
    there: one line on stderr, and True (nothing can be swept; the caller exits 1). Some of
    them: one ``tables_missing`` log line (database, tables), and the sweeps go on (those of
    the missing tables fail, as they would anyway).

    Raises:
        DatabaseError: the catalog could not be read.
    """
    tables = list(dict.fromkeys(s.table for s in sweeps))
    if not tables:
        return False
    with db.session() as session:
        missing = session.missing_tables(tables)
        reached = session.reached
    if not missing:
        return False
    chose = (
        " (no --dsn or REAPER_DSN: libpq chose it, from its PG* variables or else as the "
        "database named after your user)" if settings.dsn is None else ""
    )
    if len(missing) < len(tables):
        structlog.get_logger("reaper.cli").warning(
            "tables_missing", database=reached + chose, tables=missing
        )
        return False
    click.echo(
        f"reaper: the database reaper reached, {reached}{chose}, has no table "
        f"{', '.join(missing)}: load the schema there, or point --dsn / REAPER_DSN at the "
        "database that holds the tables",
        err=True,
    )
    return True


def _refuse_on_failed_checks(
    db: Database, sweeps: Sequence[Sweep], settings: Settings, metrics: Metrics | None
) -> None:
    """``--strict``: run the checks; on a failure log each one and exit 1 before sweeping."""
    findings = checks.run_checks(db, sweeps, settings)
    checks.report(findings, metrics)
    failed = checks.failures(findings)
    if failed:
        for f in failed:
            click.echo(f"reaper: check failed: {f.sweep} {f.check} {f.subject}: {f.detail}",
                       err=True)
        click.echo(f"reaper: --strict: {len(failed)} check(s) failed; nothing swept", err=True)
        sys.exit(EXIT_FAILED)


@cli.command("run")
@settings_options
def run(config_path: Path | None, **raw: Any) -> None:
    """Run every enabled sweep on its schedule, and serve /metrics, /healthz and /readyz.

    Each sweep runs every --interval (or its own: [sweeps.NAME] interval = "5m" in the config
    file), each run delayed by a random 0..--jitter of its interval, holding its advisory
    lock: where another process runs the sweep, the run is skipped. SIGTERM or SIGINT: the
    batches in flight finish, then exit 0 within --shutdown-timeout. A database that is down
    is waited for (/readyz says 503). The checks of `reaper check` run at startup and every
    --check-interval (each failure logged, reaper_check_failures); with --strict a failure
    refuses the start (exit code 1). SIGHUP re-reads the config file: retentions, intervals,
    enabled sweeps and budgets change without a restart; an invalid file is rejected with one
    log line and the running settings stay. Exit code 2: bad configuration, or a connection
    on which advisory locks do not hold.
    """
    from reaper.daemon import Daemon

    settings = load_settings(config_path, raw)
    sweeps = enabled_sweeps(settings, ())
    _refuse_unsweepable_if_reachable(settings, sweeps)
    daemon = Daemon(settings, sweeps, registry=REGISTRY)
    warn_if_password_on_command_line(settings)

    def on_signal(signum: int, _frame: Any) -> None:
        structlog.get_logger("reaper.cli").info(
            "stop_requested", signal=signal.Signals(signum).name
        )
        daemon.request_stop()

    # SIGHUP: re-read the config file under the same flags and variables; the work happens
    # on this (main) thread, not in the handler.
    explicit = {k: v for k, v in raw.items() if v is not None}
    reload_requested = threading.Event()

    def on_hup(signum: int, _frame: Any) -> None:
        reload_requested.set()

    def load() -> tuple[Settings, list[Sweep]]:
        new = reload_settings(config_path, explicit)
        return new, enabled_sweeps(new, ())

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hup)
    daemon.start()
    while not daemon.exit_requested.wait(0.2):
        if reload_requested.is_set():
            reload_requested.clear()
            structlog.get_logger("reaper.cli").info("reload_requested", signal="SIGHUP")
            daemon.reload(load)
    clean = daemon.stop()
    if daemon.fatal:
        click.echo(f"reaper: {daemon.fatal}", err=True)
        _exit_now(daemon.fatal_exit_code, clean)
    _exit_now(EXIT_OK, clean)


def _refuse_unsweepable_if_reachable(settings: Settings, sweeps: Sequence[Sweep]) -> None:
    """Exit 2 (RelationRefused, PredicateRefused) when a sweep's table is a relation reaper
    cannot delete from or its predicate is refused by the server's catalog; a database that
    cannot be read now (down, or behind a proxy the daemon refuses itself) is left to the
    daemon, which waits for it or says why (and checks each predicate before its first
    statement). The relation check takes one connection of its own, no pool."""
    db = open_database(settings)
    try:
        with db.dedicated_session() as session:
            refuse_unsweepable(session, sweeps)
    except errors.DatabaseError:
        return
    try:
        db.check_connection()
    except errors.ConnectionFailed:
        return
    try:
        with db:
            check_predicates(db, sweeps)
    except errors.ConnectionFailed:
        return


def _exit_now(code: int, clean: bool) -> None:
    """Exit now, without waiting for threads: the sweeps have stopped (or, when ``clean`` is
    False, had their statements cancelled) and the pool and the port are closed; what is left
    is at most a readiness probe waiting on a dead host, which must not delay the exit."""
    if not clean:
        structlog.get_logger("reaper.cli").warning("exit_with_runs_in_flight")
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def _refresh_storage_rows(db: Database, metrics: Metrics, sweeps: Sequence[Sweep]) -> None:
    try:
        with db.session() as session:
            metrics.set_storage_rows(session.storage_rows(sorted({s.table for s in sweeps})))
    except errors.DatabaseError as exc:
        structlog.get_logger("reaper.cli").warning("storage_rows_failed", error=str(exc))


def print_results(
    results: Sequence[SweepResult],
    *,
    dry_run: bool,
    wide: bool = False,
    sweeps: Sequence[Sweep] = (),
) -> None:
    """One row per sweep: sweep, table, reason, rows, batches, seconds, outcome."""
    rows: list[list[render.Cell]] = []
    for r in results:
        colour = "green" if r.outcome == "success" else "red"
        rows.append([
            r.sweep, r.table, r.reason, f"{r.rows:,}", str(r.batches), f"{r.seconds:.3f}",
            Text(r.outcome, style=colour),
        ])
    render.print_table(
        "reaper run-once" + (" (dry run: nothing deleted)" if dry_run else ""),
        [
            render.Column("sweep"), render.Column("table", optional=True),
            render.Column("reason", optional=True),
            render.Column("eligible" if dry_run else "deleted", right=True),
            render.Column("batches", right=True), render.Column("seconds", right=True),
            render.Column("outcome"),
        ],
        rows,
        wide=wide,
    )
    console = _console()
    if dry_run:
        counts = {r.sweep: r.rows for r in results if r.outcome != FAILURE}
        for note in dependants_notes(sweeps, counts):
            console.print(f"note: {note}")
    for r in results:
        for p in r.partitions:
            verb = {"drop": "dropped", "detach": "detached"}.get(p["action"], p["action"])
            if dry_run:
                console.print(
                    f"{r.sweep}: would {p['action'].replace('_', ' ')} partition "
                    f"{p['partition']} (~{p['estimated_rows']:,} rows, estimated)",
                    highlight=False,
                )
            else:
                console.print(
                    f"{r.sweep}: {verb} partition {p['partition']} "
                    f"({p['rows']:,} rows, {p['rows_source']})",
                    highlight=False,
                )
    for r in results:
        if r.error:
            console.print(Text.assemble((r.sweep, "red"), ": ", r.error))
        for h in r.holders:
            # One line however long: who holds the lock is what an operator greps for.
            console.print(Text.assemble((r.sweep, "yellow"), ": skipped, lock held by ",
                                        h.describe()), soft_wrap=True)


def dependants_notes(sweeps: Sequence[Sweep], counts: Mapping[str, int]) -> list[str]:
    """What a count of eligible rows leaves out, in a dry run and in ``status``: a sweep that
    runs after others (its ``after``) is counted against the table as it is now, while a real
    run lets those sweeps delete first, which can make more of its rows eligible (a token
    that only a stale request still references). One line per such sweep whose predecessors
    have rows to delete.

    Args:
        sweeps: the sweeps counted.
        counts: eligible rows by sweep name.
    """
    notes = []
    for s in sweeps:
        first = [name for name in s.after if counts.get(name, 0) > 0]
        if first and s.name in counts:
            rows = sum(counts[name] for name in first)
            notes.append(
                f"{s.name}: counted as its table is now; a real run first lets "
                f"{' and '.join(first)} delete {rows:,} rows, which can make more of "
                f"{s.table}'s rows eligible: the count cannot include those"
            )
    return notes


def _console() -> Console:
    """The console every line under a table goes through (the tables: reaper.render), as
    wide as the terminal (off one, COLUMNS, else 80). Markup, emoji codes and highlighting are
    off: names and server messages come from the database and the config, and are printed as
    they are ("[bold]" or ":x:" in a table name is text). Colour goes through rich Text
    styles."""
    return render.make_console()


_SWEEP_OPTION = click.option(
    "--sweep",
    "sweep_names",
    multiple=True,
    metavar="NAME",
    help="Only this sweep (repeatable). Default: every enabled sweep.",
)
_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


@cli.command("check")
@_SWEEP_OPTION
@_JSON_OPTION
@_WIDE_OPTION
@settings_options
def check_command(
    sweep_names: tuple[str, ...], as_json: bool, wide: bool, config_path: Path | None,
    **raw: Any,
) -> None:
    """Check what the sweeps rely on: tables and columns, indexes valid and ready, foreign
    keys indexed, batch plans served by an index, privileges, server version, advisory lock.

    One row per finding. Exit code 0 when nothing failed (warnings allowed), 1 otherwise.
    Needs no superuser: run it as reaper's own role.
    """
    settings = load_settings(config_path, raw)
    sweeps = enabled_sweeps(settings, sweep_names)
    db = open_database(settings)
    db.check_connection()
    with db:
        check_predicates(db, sweeps)
        findings = checks.run_checks(db, sweeps, settings)
    failed = checks.failures(findings)
    if as_json:
        click.echo(json.dumps(
            {"ok": not failed, "findings": [f.as_dict() for f in findings]}, indent=2
        ))
    else:
        colours = {checks.PASS: "green", checks.WARN: "yellow", checks.FAIL: "red"}
        rows: list[list[render.Cell]] = [
            [f.sweep, f.check, Text(f.status, style=colours[f.status]), f.subject, f.detail,
             f.fix or ""]
            for f in findings
        ]
        dropped = render.print_table(
            "reaper check",
            [render.Column("sweep"), render.Column("check"), render.Column("status"),
             render.Column("subject", optional=True), render.Column("detail", optional=True),
             render.Column("fix", optional=True)],
            rows,
            wide=wide,
        )
        console = _console()
        if dropped:
            # What a finding that did not pass says, and its fix, under the table.
            for f in findings:
                if f.status != checks.PASS:
                    text = f"{f.subject}: {f.detail}" + (f" Fix: {f.fix}" if f.fix else "")
                    console.print(Text.assemble(
                        (f.status, colours[f.status]), f" {f.sweep} {f.check}: {text}"
                    ))
        console.print(Text.assemble(
            f"{len(findings)} checks, ", (f"{len(failed)} failed", "red"),
            f", {sum(f.status == checks.WARN for f in findings)} warnings",
        ))
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


@cli.group("indexes")
def indexes_group() -> None:
    """The indexes the sweeps rely on (reaper/sql/indexes.sql)."""


@indexes_group.command("ensure")
@click.option("--dry-run", is_flag=True, help="Say what would be built or rebuilt; build nothing.")
@_JSON_OPTION
@_WIDE_OPTION
@settings_options
def indexes_ensure(
    dry_run: bool, as_json: bool, wide: bool, config_path: Path | None, **raw: Any
) -> None:
    """Build the sweeps' indexes with CREATE INDEX CONCURRENTLY (writers never wait), one at a
    time, under lock_timeout, guarded by an advisory lock; drop and rebuild any left INVALID
    by an interrupted build. Needs the tables' owner (DDL), not reaper's role.

    Exit code 0 when every index is valid and ready afterwards (or, with --dry-run, always
    0), 1 when a build failed or another run holds the lock.
    """
    settings = load_settings(config_path, raw)
    db = open_database(settings)
    db.check_connection()
    live = sys.stderr.isatty() and not as_json and not dry_run
    with db, _IndexProgress(live) as progress:
        actions = indexes.ensure(
            db, dry_run=dry_run,
            on_progress=progress.update if live else None,
            on_action=progress.action,
        )
    if as_json:
        click.echo(json.dumps([a.as_dict() for a in actions], indent=2))
    else:
        title = "reaper indexes ensure" + (" (dry run: nothing built)" if dry_run else "")
        rows: list[list[render.Cell]] = []
        for a in actions:
            c = {"failed": "red", "done": "green", "dry_run": "yellow"}.get(a.outcome, "")
            outcome = Text(a.outcome, style=c)
            rows.append([a.index, a.table, a.action, outcome, f"{a.seconds:.3f}",
                         a.error or a.detail])
        render.print_table(
            title,
            [render.Column("index"), render.Column("table", optional=True),
             render.Column("action"), render.Column("outcome"),
             render.Column("seconds", right=True, optional=True),
             render.Column("detail", optional=True)],
            rows,
            wide=wide or any(a.outcome == "failed" for a in actions),
        )
        console = _console()
        if dry_run:
            for a in actions:
                for stmt in a.statements:
                    console.print(f"{stmt};")
    sys.exit(EXIT_FAILED if any(a.outcome == "failed" for a in actions) else EXIT_OK)


class _IndexProgress:
    """A spinner and bar per build on a terminal, from pg_stat_progress_create_index."""

    def __init__(self, live: bool) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.live = live
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TextColumn("{task.fields[phase]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not live,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _IndexProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def action(self, action: indexes.IndexAction) -> None:
        if self.live and action.action in (indexes.CREATE, indexes.REBUILD):
            self._tasks[action.index] = self._progress.add_task(
                f"{action.action} {action.index}", total=None, phase="starting"
            )

    def update(self, spec: Any, row: dict[str, Any]) -> None:
        task = self._tasks.get(spec.name)
        if task is None or not row:
            return
        # blocks while scanning the table, tuples while sorting and loading the index.
        total, done = row.get("blocks_total") or 0, row.get("blocks_done") or 0
        if not total:
            total, done = row.get("tuples_total") or 0, row.get("tuples_done") or 0
        self._progress.update(task, total=total or None, completed=done,
                              phase=row.get("phase") or "")


@cli.command("status")
@_SWEEP_OPTION
@_JSON_OPTION
@_WIDE_OPTION
@click.option(
    "--max-count",
    type=click.IntRange(min=1),
    default=status.DEFAULT_BACKLOG_CAP,
    show_default=True,
    metavar="ROWS",
    help="Count each backlog up to this many rows (through the predicate's index).",
)
@settings_options
def status_command(
    sweep_names: tuple[str, ...],
    as_json: bool,
    wide: bool,
    max_count: int,
    config_path: Path | None,
    **raw: Any,
) -> None:
    """Per sweep: backlog rows and the oldest eligible row's age; the table's estimated rows,
    size on disk, dead tuples and last (auto)vacuum. Cheap: no COUNT(*) of a table.

    Exit code 0, or 1 when a sweep's status could not be read.
    """
    settings = load_settings(config_path, raw)
    sweeps = enabled_sweeps(settings, sweep_names)
    db = open_database(settings)
    db.check_connection()
    with db:
        if report_missing_tables(db, sweeps, settings):
            sys.exit(EXIT_FAILED)
        with db.session() as session:
            refuse_unsweepable(session, sweeps)
        check_predicates(db, sweeps)
        rows = status.sweep_status(db, sweeps, settings, cap=max_count)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print_status(rows, wide=wide, sweeps=sweeps)
    sys.exit(EXIT_FAILED if any(r.error for r in rows) else EXIT_OK)


def _age(seconds: float | None) -> str:
    from datetime import timedelta

    if seconds is None:
        return "-"
    # An age of days shown to the second is noise: whole minutes past an hour.
    step = 60 if seconds >= 3600 else 1
    return format_duration(timedelta(seconds=round(seconds / step) * step))


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"


def print_status(
    rows: Sequence[status.SweepStatus], *, wide: bool = False, sweeps: Sequence[Sweep] = ()
) -> None:
    """One row per sweep: backlog, oldest eligible age, table rows, size, dead tuples, vacuum."""

    def when(d: Any) -> str:
        return d.strftime("%Y-%m-%d %H:%M") if d is not None else "never"

    cells: list[list[render.Cell]] = []
    for r in rows:
        if r.error:
            cells.append([r.sweep, r.table, Text(r.error, style="red"), *[""] * 6])
            continue
        backlog = f"{'>=' if r.backlog_capped else ''}{r.backlog_rows:,}"
        est = f"{r.estimated_rows:,}" if r.estimated_rows is not None and r.estimated_rows >= 0 \
            else "never analyzed"
        cells.append([
            r.sweep, r.table, backlog, _age(r.oldest_eligible_age_seconds), est,
            _bytes(r.total_bytes), f"{r.dead_tuples:,}" if r.dead_tuples is not None else "-",
            when(r.last_vacuum), when(r.last_autovacuum),
        ])
    # A row that failed says why in its backlog cell: every column, so the reason is whole.
    render.print_table(
        "reaper status",
        [
            render.Column("sweep"), render.Column("table", optional=True),
            render.Column("backlog", right=True), render.Column("oldest", right=True),
            render.Column("est. rows", right=True), render.Column("size", right=True),
            render.Column("dead rows", right=True),
            render.Column("last vacuum", optional=True),
            render.Column("last autovacuum", optional=True),
        ],
        cells,
        wide=wide or any(r.error for r in rows),
    )
    console = _console()
    for r in rows:
        for h in r.lock_holders:
            console.print(Text.assemble((r.sweep, "yellow"), ": lock held by ", h.describe()),
                          soft_wrap=True)
    counts = {r.sweep: r.backlog_rows for r in rows if r.backlog_rows is not None}
    for note in dependants_notes(sweeps, counts):
        console.print(f"note: {note}")


def misplaced_option_hint(exc: click.ClickException, args: Sequence[str]) -> str | None:
    """For an option given on the wrong side of the command name, where it goes: reaper's
    own options (``--log-level``, ``--log-format``) come before the command, a command's
    options after it. ``args``: the command line, to quote the option with its value. None
    for any other error."""
    if not isinstance(exc, click.NoSuchOption) or exc.ctx is None:
        return None
    name = exc.option_name.split("=", 1)[0]
    given = name
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            given = arg
        elif arg == name and i + 1 < len(args) and not args[i + 1].startswith("-"):
            given = f"{name} {args[i + 1]}"

    def names(cmd: click.Command) -> set[str]:
        return {o for p in cmd.params for o in getattr(p, "opts", [])}

    if exc.ctx.command is not cli and name in names(cli):
        command = exc.ctx.command_path.removeprefix("reaper ")
        return f" {name} goes before the command: 'reaper {given} {command}'"
    if exc.ctx.command is cli:
        owners = [(path, cmd) for path, cmd in _commands(cli, "reaper") if name in names(cmd)]
        if owners:
            path, cmd = owners[0]
            param = next(p for p in cmd.params if name in getattr(p, "opts", []))
            if getattr(param, "is_flag", False):
                given = name
            return f" {name} goes after the command: '{path} {given}'"
    return None


def _commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for sub_name, cmd in group.commands.items():
        path = f"{prefix} {sub_name}"
        out += _commands(cmd, path) if isinstance(cmd, click.Group) else [(path, cmd)]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """The ``reaper`` entry point: one line on stderr and exit 2 for bad usage or config,
    exit 1 when the database cannot be reached."""
    try:
        cli.main(args=argv, prog_name="reaper", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("reaper: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = misplaced_option_hint(exc, sys.argv[1:] if argv is None else list(argv)) or (
            f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        )
        click.echo(f"reaper: {exc.format_message()}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    except errors.ConfigError as exc:
        click.echo(f"reaper: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except errors.ReaperError as exc:
        click.echo(f"reaper: {exc}", err=True)
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main()
