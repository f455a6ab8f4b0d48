"""The command line: ``reaper run-once`` (and the commands that build on it).

Every setting of :class:`reaper.config.settings.Settings` is a flag on each command, with its
``REAPER_*`` environment variable; flags and variables win over the TOML file (``--config``),
which wins over the defaults. Exit codes: 0 every sweep succeeded (3: run-once found every
sweep's lock held by another session, so nothing ran; 130 or 143: SIGINT or SIGTERM
stopped it), 1 a sweep (or the database) failed, 2 bad usage or configuration, always with one
line on stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reaper import __version__, errors, log
from reaper.config.engine import engine_options
from reaper.config.setting import Setting, envvar
from reaper.config.settings import DEFAULT_BACKLOG_CAP, Settings
from reaper.vocab import IndexOutcome, Outcome

# Everything else is imported by the command that uses it: every start pays for what this
# module imports (`reaper --version` too), and the database driver, the engine, the SQL
# parser, the terminal tables and the metrics client each cost tens of milliseconds.
# tests/unit/commands/test_startup.py keeps them out.
if TYPE_CHECKING:
    from reaper.config.load import Config
    from reaper.config.sweeps import Sweep
    from reaper.db import Database, Session
    from reaper.metrics import Metrics

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# run-once: every sweep it was asked to run was skipped, its lock held by another session.
EXIT_ALL_SKIPPED = 3


def _echo_json(value: Any) -> None:
    import json

    click.echo(json.dumps(value, indent=2))


def _logger() -> Any:
    import structlog

    return structlog.get_logger("reaper.cli")


class _SweepNamesOption(click.Option):
    """An option whose help names the built-in sweeps (``{names}`` in its text), filled in
    when the help is read (``--help``, the docs) rather than at every start: the names come
    with the sweeps' declarations, which import the database driver to compose their SQL."""

    _help_text: str | None = None

    @property
    def help(self) -> str | None:
        from reaper.config.sweeps import BUILTIN_NAMES

        if self._help_text is None:
            return None
        return self._help_text.replace("{names}", ", ".join(BUILTIN_NAMES))

    @help.setter
    def help(self, value: str | None) -> None:
        self._help_text = value


def setting_help(setting: Setting[Any]) -> str:
    """A setting's help as ``--help`` and the reference show it: its text, where a
    ``[sweeps.NAME]`` table may set its own, and its default."""
    from reaper.config.settings import setting_keys

    per_sweep = " A [sweeps.NAME] table may set its own." if setting in setting_keys() else ""
    return f"{setting.help}{per_sweep} [default: {setting.shown_default}]"


def settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add one option per setting, plus ``--config``. Values stay raw strings (None when not
    given) so that :func:`build_settings` parses every source the same way."""
    for setting in reversed(Settings.declarations()):
        # A boolean setting given alone (`--strict`) means true; `--strict false` also works.
        common: dict[str, Any] = {
            "default": None,
            "envvar": setting.envvar,
            "show_envvar": True,
            "metavar": setting.metavar or "[BOOL]",
            "help": setting_help(setting),
        }
        if setting.metavar is None:
            common.update(is_flag=False, flag_value="true")
        fn = click.option(setting.flag, setting.name, **common)(fn)
    fn = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=envvar("config"),
        show_envvar=True,
        help="TOML file of settings (keys as the flags, with _), and [sweeps.NAME] tables.",
    )(fn)
    return fn


def load(config_path: Path | None, raw: dict[str, Any]) -> Config:
    """The config from the flags/env values in ``raw`` over the TOML file at ``config_path``:
    the settings and every sweep, resolved once.

    Raises:
        ConfigError: anything invalid, in one line.
    """
    from reaper.config.load import read_config

    explicit = {k: v for k, v in raw.items() if v is not None}
    # A bad value from the environment is reported under the variable's name, not the flag's.
    ctx = click.get_current_context(silent=True)
    labels = {
        name: envvar(name)
        for name in explicit
        if ctx is not None
        and ctx.get_parameter_source(name) == click.core.ParameterSource.ENVIRONMENT
    }
    # click reads an empty variable as unset; an empty REAPER_DSN is a DSN meant to be set
    # that came out empty (an unset shell variable, an empty key of a Secret): refused below,
    # like --dsn '', instead of silently reaching libpq's defaults.
    if "dsn" not in explicit and os.environ.get(envvar("dsn")) == "":
        explicit["dsn"], labels["dsn"] = "", envvar("dsn")
    return read_config(config_path, explicit, labels=labels)


_password_warned = False


def warn_if_password_on_command_line(settings: Settings) -> None:
    """Once per process: a warning on stderr when ``--dsn`` on the command line holds a
    password (visible in ``ps`` and ``/proc/PID/cmdline``), naming the fix."""
    from reaper.db import dsn_has_password

    global _password_warned
    # A DSN given on the command line is named by its flag (settings.origins).
    on_command_line = settings.origins.get("dsn") == Settings.dsn.flag
    if _password_warned or not on_command_line or not dsn_has_password(settings.dsn):
        return
    _password_warned = True
    _logger().warning(
        "password_on_command_line",
        setting="--dsn",
        fix="every local user can read it in ps; put the password in a password file "
        "(PGPASSFILE) or the DSN in REAPER_DSN or a service file (docs/security.md)",
    )


def open_database(settings: Settings) -> Database:
    """A :class:`Database` configured from ``settings`` (not yet connected).

    Raises:
        ConfigError: the DSN does not parse; the message names where it came from.
    """
    from reaper.config.connection import connection_settings
    from reaper.db import Database

    db = Database(connection_settings(settings))
    warn_if_password_on_command_line(settings)
    return db


_WIDE_OPTION = click.option(
    "--wide",
    is_flag=True,
    help="Every column of the table, stacked one block per row when they do not fit the "
    "terminal (by default, columns are left out to fit).",
)


class _Command(click.Command):
    """A reaper command: logging is configured as it runs, not as soon as reaper's own
    options are parsed, so that its ``--help`` and a bad flag load no logging stack."""

    def invoke(self, ctx: click.Context) -> Any:
        root = ctx.find_root()
        log_level, log_format = root.params["log_level"], root.params["log_format"]
        if log_level == "auto":
            command = root.invoked_subcommand
            log_level = "warning" if sys.stderr.isatty() and command != "run" else "info"
        log.configure(log_level, None if log_format == "auto" else log_format == "json")
        return super().invoke(ctx)


class _Group(click.Group):
    command_class = _Command
    group_class = type


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="reaper")
@click.option(
    "--log-level",
    type=click.Choice(["auto", *log.LEVELS]),
    default="auto",
    envvar=envvar("log_level"),
    show_envvar=True,
    show_default=True,
    help="Lowest level logged (to stderr). auto: info, but warning for a command other than "
    "run whose stderr is a terminal (its table and progress bar show the same figures).",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    envvar=envvar("log_format"),
    show_envvar=True,
    show_default=True,
    help="auto: console lines on a terminal, JSON lines otherwise.",
)
def cli(log_level: str, log_format: str) -> None:
    """reaper keeps a control plane's PostgreSQL tables bounded: it deletes what the retention
    rules say is garbage, in short index-served batches, and counts what it removed."""
    # The options are read when a command runs (_Command).


@cli.command("run-once")
@click.option(
    "--sweep",
    "sweep_names",
    multiple=True,
    metavar="NAME",
    cls=_SweepNamesOption,
    help="Run only this sweep (repeatable), even when the config disables it. Default: every "
    "enabled sweep. Built-in names: {names}, and those the config's [sweeps.NAME] tables "
    "declare.",
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
    SIGINT or SIGTERM during the sweeps: the batch in flight finishes, no other sweep starts,
    and the sweeps that ran are reported as at a normal end (the table or --json,
    --metrics-file); then exit code 130 or 143 (128 + the signal), whatever their outcomes. A
    second signal, 2 s or more after the first, ends reaper at once.
    """
    config = load(config_path, raw)
    settings, sweeps = config.settings, config.enabled(sweep_names)
    # Imported once the configuration is valid (as in every command): bad input costs none.
    from reaper.commands import cascades
    from reaper.commands.progress import SweepProgress
    from reaper.commands.stop import StopOnSignal
    from reaper.engine.preflight import refuse_unsweepable, warn_if_superuser_in
    from reaper.engine.run import RunRequest, Sweeper

    stdout = [s.name for s in sweeps if s.archive_file == "-"]
    if as_json and stdout and not dry_run:
        raise errors.ConfigError(
            f'[sweeps.{stdout[0]}] archive_file: "-" writes the deleted rows to standard '
            "output, where --json writes its report; give the archive a file's path, or "
            "leave out --json"
        )
    db = open_database(settings)
    # The metrics of a run are read from its --metrics-file alone: without one, none are
    # kept (nor the metrics client loaded), as for a dry run's batches.
    metrics = _file_metrics(sweeps) if metrics_file is not None else None
    # The checks before the first sweep share one connection of their own (its connect
    # says why the database cannot be reached); the pool's first connection, which the
    # sweeps use, is made meanwhile. A real run first checks that the sweeps' advisory
    # locks hold (not behind a transaction-pooling proxy).
    with contextlib.ExitStack() as stack:
        with db.first_session(check_locks=not dry_run) as first:
            stack.enter_context(db)
            if report_missing_tables(first, sweeps, settings):
                sys.exit(EXIT_FAILED)
            # A by-hand run refuses an archive that cannot take its rows before any sweep
            # (the daemon's other sweeps go on: that sweep's runs fail and say why); a dry
            # run archives nothing.
            refuse_unsweepable(first, sweeps, trails=not dry_run)
            warn_if_superuser_in(first)
            if not settings.strict:
                _warn_missing_indexes(first, sweeps)
        if settings.strict:
            _refuse_on_failed_checks(db, sweeps, settings, metrics)
        live = sys.stderr.isatty() and not as_json and not dry_run
        results = []
        # One invocation, one window of the full-table interlock: its sweeps are judged
        # together.
        sweeper = Sweeper()
        # From the first sweep until the command returns (its context closes, after the
        # report), a SIGINT or SIGTERM ends the sweeps after their batch in flight and starts
        # no other: what was deleted is still reported, and the metrics file written.
        interrupt = click.get_current_context().with_resource(StopOnSignal())
        with SweepProgress(live=live) as progress:
            for sweep in sweeps:
                if interrupt.requested:
                    break
                progress.start(sweep.name)
                result = sweeper.run(
                    db,
                    sweep,
                    engine_options(settings),
                    RunRequest(dry_run=dry_run, on_batch=progress.batch, stop=interrupt.stop),
                    metrics=metrics,
                )
                progress.finish(result)
                results.append(result)
        # What a dry run's deletes would take with them through ON DELETE CASCADE.
        cascaded = cascades.of_sweeps(db, sweeps) if dry_run else {}
        metrics_written = True
        if metrics is not None and metrics_file is not None:
            _refresh_storage_rows(db, metrics, sweeps)
            metrics_written = _write_metrics(metrics, metrics_file)
    # The tables' module (and rich with it) is loaded where a table or a note is written:
    # a run with --json writes neither.
    if dry_run:
        from reaper.commands import render

        notes = render.dependants_notes(sweeps, {r.sweep: r.rows for r in results if not r.failed})
        for r in results:
            r.note = notes.get(r.sweep)
    if as_json:
        docs = [r.as_dict() for r in results]
        if dry_run:
            for d, r in zip(docs, results, strict=True):
                d["cascades"] = [cascades.as_dict(c, r.rows) for c in cascaded.get(r.sweep, [])]
        _echo_json(docs)
    else:
        from reaper.commands import render

        render.print_results(results, dry_run=dry_run, wide=wide, cascaded=cascaded)
    if interrupt.requested:
        # Whatever the sweeps' outcomes: a stopped run is not a finished one, and the exit
        # code says so as a shell reports a process the signal ended.
        _logger().warning(
            "stopped_by_signal",
            signal=interrupt.signal_name,
            not_started=[s.name for s in sweeps[len(results) :]],
        )
        sys.exit(interrupt.exit_code)
    failed = any(r.failed for r in results) or not metrics_written
    if failed:
        sys.exit(EXIT_FAILED)
    # Nothing ran at all: a squatter on the lock keys must not look like a clean run.
    sys.exit(
        EXIT_ALL_SKIPPED
        if results and all(r.outcome == Outcome.SKIPPED for r in results)
        else EXIT_OK
    )


def _file_metrics(sweeps: Sequence[Sweep]) -> Metrics:
    """The metrics of one run-once, in a registry of their own, for its --metrics-file."""
    from prometheus_client import CollectorRegistry

    from reaper.metrics import Metrics

    return Metrics(sweeps, CollectorRegistry())


def _warn_missing_indexes(session: Session, sweeps: Sequence[Sweep]) -> None:
    """One warning line per index a sweep relies on that is missing or INVALID: its batches
    then scan the table, many times slower, and a run should not do that in silence (the
    whole of ``reaper check`` is for --strict and ``check``). One query on ``session`` (the
    checks' own, while the pool connects)."""
    import structlog

    from reaper.commands import checks

    for sweep, index, problem in checks.missing_indexes(session, sweeps):
        structlog.get_logger("reaper.cli").warning(
            "index_missing",
            sweep=sweep,
            index=index,
            state=problem,
            fix=checks.index_statements(next(s for s in sweeps if s.name == sweep)),
        )


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
        _logger().error("metrics_file_failed", path=str(path), error=exc.strerror or str(exc))
        return False


def report_missing_tables(session: Session, sweeps: Sequence[Sweep], settings: Settings) -> bool:
    """Say once which database reaper reached (``session``'s) when swept tables are missing
    from it, rather than one "does not exist" per sweep that never names the database. None
    of the tables there: one line on stderr, and True (nothing can be swept; the caller exits
    1). Some of them: one ``tables_missing`` log line (database, tables), and the sweeps go
    on (those of the missing tables fail, as they would anyway).

    Raises:
        DatabaseError: the catalog could not be read.
    """
    tables = list(dict.fromkeys(s.table for s in sweeps))
    if not tables:
        return False
    missing = session.missing_tables(tables)
    reached = session.reached
    if not missing:
        return False
    chose = (
        " (no --dsn or REAPER_DSN: libpq chose it, from its PG* variables or else as the "
        "database named after your user)"
        if settings.dsn is None
        else ""
    )
    if len(missing) < len(tables):
        _logger().warning("tables_missing", database=reached + chose, tables=missing)
        return False
    builtin = {s.table for s in sweeps if s.builtin}
    elsewhere = (
        f" (the built-in sweeps' tables are read in schema {settings.schema}: set schema, "
        "--schema or REAPER_SCHEMA to the one that holds them)"
        if builtin & set(missing)
        else ""
    )
    click.echo(
        f"reaper: the database reaper reached, {reached}{chose}, has no table "
        f"{', '.join(missing)}{elsewhere}: load the schema there, or point --dsn / REAPER_DSN "
        "at the database that holds the tables",
        err=True,
    )
    return True


def _refuse_on_failed_checks(
    db: Database, sweeps: Sequence[Sweep], settings: Settings, metrics: Metrics | None
) -> None:
    """``--strict``: run the checks; on a failure log each one and exit 1 before sweeping."""
    from reaper.commands import checks

    findings = checks.run_checks(db, sweeps, settings)
    checks.report(findings, metrics)
    failed = checks.failures(findings)
    if failed:
        for f in failed:
            click.echo(
                f"reaper: check failed: {f.sweep} {f.check} {f.subject}: {f.detail}", err=True
            )
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
    refuses the start (exit code 1). With --schedule a sweep runs at cron times instead of
    every interval; with --window it starts runs only inside a daily window, and a run still
    going when the window closes stops before its next batch. SIGHUP re-reads the config
    file: retentions, intervals, schedules, windows, enabled sweeps and budgets change
    without a restart; an invalid file is rejected with one
    log line and the running settings stay. Exit code 2: bad configuration, or a connection
    on which advisory locks do not hold.
    """
    config = load(config_path, raw)
    settings, sweeps = config.settings, config.enabled()
    from prometheus_client import REGISTRY

    from reaper.daemon.process import serve
    from reaper.daemon.scheduler import Daemon

    _refuse_unsweepable_if_reachable(settings, sweeps)
    daemon = Daemon(settings, sweeps, registry=REGISTRY)
    warn_if_password_on_command_line(settings)

    # SIGHUP re-reads the config file under the same flags and variables.
    def reload() -> tuple[Settings, list[Sweep]]:
        new = config.reload()
        return new.settings, new.enabled()

    serve(daemon, reload)


def _refuse_unsweepable_if_reachable(settings: Settings, sweeps: Sequence[Sweep]) -> None:
    """Exit 2 (RelationRefused) when a sweep's table is a relation reaper cannot delete from,
    and warn (one line) when reaper's role is a superuser; a database that cannot be read
    now (down, or behind a proxy the daemon refuses itself) is left to the daemon, which
    waits for it or says why. The relation check takes one connection of its own, no
    pool."""
    from reaper.engine.preflight import refuse_unsweepable, warn_if_superuser

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
            warn_if_superuser(db)
    except errors.DatabaseError:
        return


def _refresh_storage_rows(db: Database, metrics: Metrics, sweeps: Sequence[Sweep]) -> None:
    try:
        with db.session() as session:
            metrics.set_storage_rows(session.storage_rows(sorted({s.table for s in sweeps})))
    except errors.DatabaseError as exc:
        _logger().warning("storage_rows_failed", error=str(exc))


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
    sweep_names: tuple[str, ...],
    as_json: bool,
    wide: bool,
    config_path: Path | None,
    **raw: Any,
) -> None:
    """Check what the sweeps rely on: tables and columns, indexes valid and ready, foreign
    keys indexed, batch plans served by an index, privileges, server version, advisory lock.

    One row per finding. Exit code 0 when nothing failed (warnings allowed), 1 otherwise.
    Needs no superuser: run it as reaper's own role.
    """
    config = load(config_path, raw)
    settings, sweeps = config.settings, config.enabled(sweep_names)
    from reaper.commands import checks, render

    db = open_database(settings)
    db.check_connection()
    with db:
        findings = checks.run_checks(db, sweeps, settings)
    failed = checks.failures(findings)
    if as_json:
        _echo_json({"ok": not failed, "findings": [f.as_dict() for f in findings]})
    else:
        render.print_findings(findings, wide=wide)
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


@cli.group("indexes")
def indexes_group() -> None:
    """The indexes the sweeps rely on (sql/indexes.sql, shipped inside reaper)."""


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

    Exit code 0 when every index is valid and ready afterwards (or, with --dry-run, 0 unless
    the database has none of the sweeps' tables), 1 when a build failed, another run holds
    the lock, or none of the tables exist there.
    """
    config = load(config_path, raw)
    settings = config.settings
    from reaper.commands import indexes, render
    from reaper.commands.progress import IndexProgress
    from reaper.sqltext import sqlinfo

    db = open_database(settings)
    live = sys.stderr.isatty() and not as_json and not dry_run
    with contextlib.ExitStack() as stack:
        with db.first_session() as first:
            stack.enter_context(db)
            if report_missing_tables(first, [s for s in config.sweeps if s.builtin], settings):
                sys.exit(EXIT_FAILED)
        with IndexProgress(live) as progress:
            actions = indexes.ensure(
                db,
                dry_run=dry_run,
                specs=sqlinfo.shipped_indexes(settings.schema),
                on_progress=progress.update if live else None,
                on_action=progress.action,
            )
    if as_json:
        _echo_json([a.as_dict() for a in actions])
    else:
        render.print_index_actions(actions, dry_run=dry_run, wide=wide)
    sys.exit(EXIT_FAILED if any(a.outcome == IndexOutcome.FAILED for a in actions) else EXIT_OK)


@cli.command("status")
@_SWEEP_OPTION
@_JSON_OPTION
@_WIDE_OPTION
@click.option(
    "--max-count",
    type=click.IntRange(min=1),
    default=DEFAULT_BACKLOG_CAP,
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
    size on disk, dead tuples and last (auto)vacuum; when `reaper run` runs it next, and its
    window, open or closed. Cheap: no COUNT(*) of a table.

    Exit code 0, or 1 when a sweep's status could not be read.
    """
    config = load(config_path, raw)
    settings, sweeps = config.settings, config.enabled(sweep_names)
    from reaper.commands import render, status
    from reaper.engine.preflight import refuse_unsweepable

    db = open_database(settings)
    with contextlib.ExitStack() as stack:
        # As run-once: the checks on a connection of their own, while the pool connects.
        with db.first_session() as first:
            stack.enter_context(db)
            if report_missing_tables(first, sweeps, settings):
                sys.exit(EXIT_FAILED)
            refuse_unsweepable(first, sweeps)
        rows = status.sweep_status(db, sweeps, settings, cap=max_count)
    if as_json:
        _echo_json([r.as_dict() for r in rows])
    else:
        render.print_status(rows, wide=wide, sweeps=sweeps)
    sys.exit(EXIT_FAILED if any(r.error for r in rows) else EXIT_OK)


# Options whose value is never repeated back (a DSN may hold a password), with the word that
# stands for it in a hint.
_SECRET_OPTIONS = {"--dsn": "DSN"}


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
    if name in _SECRET_OPTIONS and given != name:
        # Its value may hold a password: the hint names the option, never the value.
        given = f"{name} {_SECRET_OPTIONS[name]}"

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


# Raised by click 8.2 and later for a group called without its command.
_NO_ARGS_IS_HELP: type[click.ClickException] | None = getattr(
    click.exceptions, "NoArgsIsHelpError", None
)


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
        if _NO_ARGS_IS_HELP is not None and isinstance(exc, _NO_ARGS_IS_HELP) and ctx:
            # `reaper` or `reaper indexes` alone: the command's help as it is (a command is
            # missing, so the exit code says usage).
            click.echo(ctx.get_help(), err=True)
            sys.exit(EXIT_USAGE)
        hint = misplaced_option_hint(exc, sys.argv[1:] if argv is None else list(argv)) or (
            f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        )
        click.echo(log.inert_lines(f"reaper: {exc.format_message()}{hint}"), err=True)
        sys.exit(EXIT_USAGE)
    except errors.ConfigError as exc:
        click.echo(log.inert_lines(f"reaper: {exc}"), err=True)
        sys.exit(EXIT_USAGE)
    except errors.ReaperError as exc:
        click.echo(log.inert_lines(f"reaper: {exc}"), err=True)
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main()
