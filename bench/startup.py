"""S, start-up: what a user waits for before reaper does anything. ``reaper --version``, and
``reaper run-once`` on an empty database (the reference schema and its indexes, no rows), each
run as a user runs it (a new process of the installed entry point), several times; the median
is shown beside its target. Wall time includes the interpreter's own start; CPU time (user +
system of the process) is steadier on a shared machine, and the load average is printed with
the table, since other work on the machine slows every start."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import report
from bench.pg import Server
from bench.variants import percentile

STARTUP_RUNS = 9
# A folder holding another reaper's package with its SQL inside it, as a wheel installs it:
# `git archive REV reaper sql | tar -x -C DIR && mv DIR/sql DIR/reaper/sql` (without it, the
# editable install's SQL would be read): each start of it (the same interpreter and packages,
# that folder first on PYTHONPATH) follows each start of the installed reaper, as rows of
# their own.
BASELINE_ENV = "REAPER_BENCH_S_BASELINE"
VERSION_TARGET_SECONDS = 0.15
RUN_ONCE_TARGET_SECONDS = 0.5


def _reaper() -> str:
    """The installed ``reaper`` script beside this interpreter."""
    return str(Path(sys.executable).with_name("reaper"))


def _timed(args: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """``reaper ARGS`` once: ``(wall seconds, CPU seconds)`` of its process.

    Raises:
        RuntimeError: it did not exit 0 (its stderr in the message).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [_reaper(), *args], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"reaper {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _no_rows(_: Any) -> None:
    """The empty database's fill: none."""


# `reaper run-once` in a process that notes the clocks (wall, and the process's CPU) where
# each step of the command ends, by wrapping the command line's functions; printed at exit
# as one JSON line: [[step, wall seconds, CPU seconds], ...].
_PHASE_PROBE = """
import atexit, json, os, sys, time
T = [("interpreter started", time.time() - float(os.environ["BENCH_SPAWNED_AT"]),
      time.process_time())]
last = [time.perf_counter(), time.process_time()]
def mark(step):
    wall, cpu = time.perf_counter(), time.process_time()
    T.append((step, wall - last[0], cpu - last[1]))
    last[:] = [wall, cpu]
import reaper.cli as cli
from reaper import log
mark("click and reaper.cli imported")
def wrap(module, name, before=None, after=None):
    f = getattr(module, name, None)
    if f is None:  # renamed: its step joins the next one
        return
    def wrapped(*a, **k):
        if before: mark(before)
        out = f(*a, **k)
        if after: mark(after)
        return out
    setattr(module, name, wrapped)
wrap(log, "configure", after="structlog imported, logging configured")
wrap(cli, "load", after="configuration loaded (psycopg imported with it)")
wrap(cli, "open_database", before="the run's modules imported (engine, db, pool)")
wrap(cli, "_warn_missing_indexes",
     after="checks before the first sweep (2 connections, tables, kinds, role, indexes)")
def report():
    mark("the sweeps, the table printed, the pool closed")
    sys.__stderr__.write("PHASES " + json.dumps(T) + "\\n")
atexit.register(report)
cli.main(sys.argv[1:])
"""


def _phases(env: dict[str, str], runs: int) -> list[list[str]]:
    """Where ``reaper run-once``'s time goes, step by step: ``[step, median wall ms, median
    CPU ms]`` rows over ``runs`` runs (after one not counted)."""
    got: list[list[tuple[str, float, float]]] = []
    for i in range(runs + 1):
        proc = subprocess.run(
            [sys.executable, "-c", _PHASE_PROBE, "run-once"],
            env=env | {"BENCH_SPAWNED_AT": repr(time.time())},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        lines = [x for x in proc.stderr.splitlines() if x.startswith("PHASES ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"reaper run-once (phases) exited {proc.returncode}: {proc.stderr}")
        if i:
            got.append(json.loads(lines[-1].removeprefix("PHASES ")))
    rows = []
    for j, (step, _, _) in enumerate(got[0]):
        wall = percentile([r[j][1] for r in got], 0.5)
        cpu = percentile([r[j][2] for r in got], 0.5)
        rows.append([step, f"{wall * 1000:.0f}", f"{cpu * 1000:.0f}"])
    return rows


def run(server: Server, *, runs: int = STARTUP_RUNS, say: Callable[[str], None]) -> str:
    """The start-up table (Markdown), with the load average and the targets; with
    ``REAPER_BENCH_S_BASELINE`` set, the baseline's starts interleaved, a row each."""
    baseline = os.environ.get(BASELINE_ENV)
    if baseline and not (Path(baseline) / "reaper" / "cli.py").is_file():
        raise RuntimeError(f"{BASELINE_ENV}={baseline}: no reaper/cli.py there")
    name = server.seed("startup", _no_rows)
    # PYTHONDONTWRITEBYTECODE left out: the warm-up run writes reaper's bytecode caches, as
    # pip does when it installs the package; with it, every start compiled reaper's own
    # modules again (about 0.1 s of CPU here), which no installed reaper pays.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("REAPER_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env |= {"REAPER_DSN": server.dsn_of(name), "REAPER_LOG_LEVEL": "warning"}
    cases = [
        ("`reaper --version`", ["--version"], VERSION_TARGET_SECONDS),
        ("`reaper run-once`, empty database", ["run-once"], RUN_ONCE_TARGET_SECONDS),
    ]
    variants = {"": env}
    if baseline:
        variants[" (baseline)"] = env | {"PYTHONPATH": baseline}
    rows = []
    load_before = os.getloadavg()
    try:
        for label, args, target in cases:
            say(f"S: {label} x {runs}")
            for venv in variants.values():
                _timed(args, venv)  # bytecode caches written, the server's catalog cached
            # Interleaved with nothing else of the bench: one after the other, a start of
            # each variant in turn.
            samples: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
            for _ in range(runs):
                for v, venv in variants.items():
                    samples[v].append(_timed(args, venv))
            for v, got in samples.items():
                walls = [w for w, _ in got]
                cpus = [c for _, c in got]
                median = percentile(walls, 0.5)
                rows.append(
                    [
                        label + v,
                        f"{median:.3f}",
                        f"{min(walls):.3f}",
                        f"{max(walls):.3f}",
                        f"{percentile(cpus, 0.5):.3f}",
                        f"{target:g}",
                        "met" if median < target else "MISSED",
                    ]
                )
        say(f"S: `reaper run-once` step by step x {runs}")
        steps = _phases(env, runs)
    finally:
        server.release(name)
    load_after = os.getloadavg()
    table = report.table(
        ["start", "median s", "min s", "max s", "CPU s (median)", "target s", "median < target"],
        rows,
    )
    by_step = report.table(
        ["`reaper run-once`, empty database: step", "wall ms (median)", "CPU ms (median)"], steps
    )
    return (
        f"## S start-up: median of {runs} runs each, a new process every time\n\n{table}\n\n"
        f"{by_step}\n\n"
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)} on {os.cpu_count()} cores. "
        "A start is mostly the interpreter's and the imports' CPU time: other work on the "
        "machine stretches its wall time (the steps: each one's own clocks, in a process "
        "that wraps the command line's functions).\n"
    )
