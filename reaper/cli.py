"""The command line: ``reaper run-once`` (and the commands that build on it).

Every setting of :class:`reaper.settings.Settings` is a flag on each command, with its
``REAPER_*`` environment variable; flags and variables win over the TOML file (``--config``),
which wins over the defaults. Exit codes: 0 every sweep succeeded, 1 a sweep (or the
database) failed, 2 bad usage or configuration, always with one line on stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import structlog
from prometheus_client import REGISTRY, CollectorRegistry
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from reaper import __version__, errors, log
from reaper.db import Database
from reaper.metrics import Metrics
from reaper.runner import FAILURE, SweepResult, run_sweeps
from reaper.settings import SETTING_FIELDS, Settings, build_settings, format_duration, load_toml
from reaper.sweeps import BUILTIN_SWEEPS, Sweep, configured_sweeps, select

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
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
        fn = click.option(
            flag,
            f.name,
            default=None,
            envvar=_envvar(f.name),
            show_envvar=True,
            metavar=f.metadata.get("metavar") or "BOOL",
            help=help_text,
        )(fn)
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
    return build_settings(
        explicit, file_values, source=str(config_path or "config"), labels=labels
    )


def open_database(settings: Settings) -> Database:
    """A :class:`Database` configured from ``settings`` (not yet connected)."""
    return Database(
        settings.dsn,
        statement_timeout=settings.statement_timeout,
        lock_timeout=settings.lock_timeout,
        idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
        synchronous_commit=settings.synchronous_commit,
        connect_timeout=settings.connect_timeout,
    )


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
    metrics_file: Path | None,
    config_path: Path | None,
    **raw: Any,
) -> None:
    """Run the sweeps once, in dependency order, and print one row per sweep.

    Exit code 0 when every sweep succeeded, 1 when any failed, 2 for bad usage.
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
        results = run_sweeps(db, sweeps, settings, metrics=metrics, dry_run=dry_run)
        metrics_written = True
        if metrics_file is not None:
            _refresh_storage_rows(db, metrics, sweeps)
            metrics_written = _write_metrics(metrics, metrics_file)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print_results(results, dry_run=dry_run)
    failed = any(r.outcome == FAILURE for r in results) or not metrics_written
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


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


@cli.command("run")
@settings_options
def run(config_path: Path | None, **raw: Any) -> None:
    """Run every enabled sweep on its schedule, and serve /metrics, /healthz and /readyz.

    Each sweep runs every --interval (or its own: [sweeps.NAME] interval = "5m" in the config
    file), each run delayed by a random 0..--jitter of its interval, holding its advisory
    lock: where another process runs the sweep, the run is skipped. SIGTERM or SIGINT: the
    batches in flight finish, then exit 0 within --shutdown-timeout. A database that is down
    is waited for (/readyz says 503). Exit code 2: bad configuration, or a connection on
    which advisory locks do not hold.
    """
    from reaper.daemon import Daemon

    settings = load_settings(config_path, raw)
    sweeps = enabled_sweeps(settings, ())
    daemon = Daemon(settings, sweeps, registry=REGISTRY)

    def on_signal(signum: int, _frame: Any) -> None:
        structlog.get_logger("reaper.cli").info(
            "stop_requested", signal=signal.Signals(signum).name
        )
        daemon.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    daemon.start()
    while not daemon.exit_requested.wait(1.0):
        pass
    clean = daemon.stop()
    if daemon.fatal:
        click.echo(f"reaper: {daemon.fatal}", err=True)
        _exit_now(EXIT_USAGE, clean)
    _exit_now(EXIT_OK, clean)


def _exit_now(code: int, clean: bool) -> None:
    """Exit now, without waiting for threads: the sweeps have stopped (or, when ``clean`` is
    False, had their statements cancelled) and the pool and the port are closed; what is left
    is at most a readiness probe waiting on a dead host, which must not delay the exit."""
    import logging
    import os

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


def print_results(results: Sequence[SweepResult], *, dry_run: bool) -> None:
    """One row per sweep: sweep, table, reason, rows, batches, seconds, outcome."""
    # Off a terminal rich assumes 80 columns and would truncate names; give it room.
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title="reaper run-once" + (" (dry run: nothing deleted)" if dry_run else ""))
    table.add_column("sweep")
    table.add_column("table")
    table.add_column("reason")
    table.add_column("eligible" if dry_run else "deleted", justify="right")
    table.add_column("batches", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("outcome")
    for r in results:
        colour = "green" if r.outcome == "success" else "red"
        table.add_row(
            escape(r.sweep), escape(r.table), escape(r.reason), f"{r.rows:,}", str(r.batches),
            f"{r.seconds:.3f}",
            f"[{colour}]{r.outcome}[/{colour}]",
        )
    console.print(table)
    for r in results:
        if r.error:
            # The error is the database's text: escaped, so a "[" in it is not markup.
            console.print(
                f"[red]{escape(r.sweep)}[/red]: {escape(r.error)}", highlight=False, markup=True
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
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
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
