"""``make bench`` / ``python -m bench``: reaper's benchmarks, printed as Markdown tables.

The server: ``REAPER_BENCH_DSN``, else ``REAPER_TEST_DSN``, else an embedded one
(reaper.dev.devserver). Each scenario creates its own databases and drops them; B6 runs on a
throwaway primary and standby of its own (bench.replica). The default run (S, the start-up,
then B1-B6 and B8) takes about 15 minutes on 2 cores; ``--large`` adds the 20,000,000-row point
of B2; ``--crossover`` and ``--tune`` measure what reaper's defaults are set from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import b7, b8, report, scenarios, startup
from bench.pg import Server
from bench.variants import Run, percentile
from reaper.config.settings import DEFAULT_PARALLEL
from reaper.dev import devserver

B1_ROWS = 2_000_000
# B1's variants run this many interleaved rounds; the median of each is reported.
B1_ROUNDS = 3
# B1 at --parallel 2: at most this fraction of one plain DELETE's time.
PARALLEL_TARGET = 0.75
B2_ROWS = (200_000, 2_000_000)
B2_LARGE_ROWS = 20_000_000
B3_ROWS = 10_000_000
B4_ROWS = 2_000_000
# B4 runs the paced and the unpaced sweep in turn this many times (medians compared).
B4_ROUNDS = 3
# The WAL brake's line: a limit well under what the sweep writes unbraked here (~50 MB/s).
B4_WAL_RATE = 20_000_000
# B6: 4,000,000 members, 2,000,000 of them garbage. The sweep takes about 2 s unpaced here
# (1,000,000 rows took 0.9 s, less than the 0.5 s before the pause plus the 1 s limit), so
# the standby's limit is 1 s (the default 10 s would never be reached), and its replay stays
# paused HOLD seconds more after reaper should have stopped.
B6_ROWS = 4_000_000
B6_MAX_LAG_SECONDS = 1.0
B6_HOLD_SECONDS = 5.0
# The LIMIT loop is quadratic: at 20M rows it would run for an hour; it stops after this.
LARGE_LOOP_MAX_SECONDS = 300.0


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def machine(server: Server) -> str:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = "?"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    pg = server.describe()
    return (
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} x {cpu}, {mem} RAM, "
        f"{platform.system()} {platform.release()}; PostgreSQL {pg['server_version']} "
        f"(shared_buffers {pg['shared_buffers']}, max_wal_size {pg['max_wal_size']}, "
        f"full_page_writes {pg['full_page_writes']}, autovacuum {pg['autovacuum']}); "
        "the machine is shared with other work, so single runs are noisy"
    )


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        default="S,B1,B2,B3,B4,B5,B6,B8",
        help="comma-separated scenarios (S: start-up, B1..B8); default S, B1..B6 and B8",
    )
    p.add_argument(
        "--large", action="store_true", help="add B2's 20,000,000-row point (about 8 more minutes)"
    )
    p.add_argument(
        "--crossover",
        action="store_true",
        help="heap walk vs index batches by garbage fraction (sets heap_walk_threshold)",
    )
    p.add_argument(
        "--tune",
        action="store_true",
        help="reaper's sweep at several batch settings (sets the defaults)",
    )
    p.add_argument(
        "--b8-rows",
        type=int,
        default=b8.B8_ROWS,
        help="B8's table size (default 8,000,000: about 3.5 minutes a round of a, b and c)",
    )
    p.add_argument(
        "--b8-rounds",
        type=int,
        default=b8.B8_ROUNDS,
        help="B8's interleaved rounds of its variants (default 1)",
    )
    p.add_argument(
        "--b8-variants",
        default=b8.B8_VARIANTS,
        help="B8's variants (default abc; d, the index path, takes about 8 minutes "
        "at 8,000,000 rows)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep the seeded template databases (reaper_bench_*) and reuse them",
    )
    p.add_argument(
        "--dsn",
        default=None,
        help="server DSN (default: REAPER_BENCH_DSN, REAPER_TEST_DSN, else an embedded PostgreSQL)",
    )
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    only = {s.strip().upper() for s in args.only.split(",") if s.strip()}
    if args.dsn:
        os.environ["REAPER_BENCH_DSN"] = args.dsn
    env = "REAPER_BENCH_DSN" if os.environ.get("REAPER_BENCH_DSN") else "REAPER_TEST_DSN"
    started = time.perf_counter()
    with devserver.server(env) as dsn:
        server = Server(dsn, reuse=args.reuse)
        try:
            print(f"# reaper bench\n\nMachine: {machine(server)}\n", flush=True)
            run_all(server, args, only)
        finally:
            server.drop_all()
    print(f"\nTotal: {time.perf_counter() - started:.0f} s", flush=True)
    return 0


def run_all(server: Server, args: argparse.Namespace, only: set[str]) -> None:
    out = print
    if "S" in only:
        out(startup.run(server, say=say), flush=True)
    if "B1" in only or "B2" in only:
        sizes = list(B2_ROWS) if "B2" in only else [B1_ROWS]
        if args.large:
            sizes.append(B2_LARGE_ROWS)
        scaling: list[tuple[int, list[Run]]] = []
        for rows in sizes:
            say(f"B1/B2: {rows:,} requests")
            runs, _ = scenarios.backlog(
                server,
                rows,
                loop_max_seconds=LARGE_LOOP_MAX_SECONDS,
                with_trail=rows == B1_ROWS and "B1" in only,
                with_parallel=rows == B1_ROWS and "B1" in only,
                repeat=B1_ROUNDS if rows == B1_ROWS else 1,
                say=say,
            )
            scaling.append((rows, runs))
            if rows == B1_ROWS and "B1" in only:
                out("## B1 backlog: 2,000,000 requests, two thirds garbage, interleaved\n")
                out(report.runs_table(runs) + "\n")
                out(b1_verdict(runs) + "\n", flush=True)
        if "B2" in only:
            out("## B2 scaling: B1 at several sizes\n")
            out(scaling_table(scaling) + "\n", flush=True)
    template = None
    if "B3" in only or "B5" in only:
        say("B3: steady state")
        runs, template, plan = scenarios.steady_state(
            server, B3_ROWS, 1000, say=say, run_variants="B3" in only
        )
        if "B3" in only:
            out("## B3 steady state: 10,000,000 requests, 10,000 garbage scattered\n")
            out(report.runs_table(runs) + "\n")
            seq = "Seq Scan on enrollment_requests" in plan
            out(
                f"Ratio (c)/(a): {runs[2].seconds / runs[0].seconds:.2f}x (target <= 1.5x). "
                f"Sequential scan of the table in reaper's index batch: "
                f"{'YES' if seq else 'no'}. Plan of one index batch:\n"
            )
            out("```\n" + plan + "\n```\n", flush=True)
    if "B4" in only:
        say("B4: live traffic")
        out("## B4 live traffic: 1,000,000-row backlog of 2,000,000 nodes, clients refreshing\n")
        b4 = scenarios.live_traffic(server, B4_ROWS, say=say, rounds=B4_ROUNDS)
        out(traffic_table(b4) + "\n")
        out(b4_verdict(b4) + "\n", flush=True)
        say("B4: the WAL brake")
        out(
            f"### The WAL brake: the same backlog, no clients, `--max-wal-rate` "
            f"{B4_WAL_RATE / 1e6:.0f} MB/s and none, in turn\n"
        )
        out(
            wal_table(scenarios.wal_brake(server, B4_ROWS, B4_WAL_RATE, rounds=2, say=say)) + "\n",
            flush=True,
        )
    if "B5" in only and template is not None:
        say("B5: gauges")
        out("## B5 gauges on the 10,000,000-row table (20 runs each)\n")
        gauge_rows = []
        for label, samples, value in scenarios.gauges(server, template):
            gauge_rows.append(
                [
                    label,
                    f"{percentile(samples, 0.5):.2f}",
                    f"{max(samples):.2f}",
                    f"{value:,}" if isinstance(value, int) else str(value),
                ]
            )
        out(report.table(["query", "p50 ms", "max ms", "value"], gauge_rows) + "\n", flush=True)
        out(
            "Each gauge as `reaper run` refreshes it (its Session call, default settings; "
            "target < 10 ms):\n"
        )
        daemon_rows = []
        for label, samples, value in scenarios.daemon_gauges(server, template):
            p50 = percentile(samples, 0.5)
            daemon_rows.append(
                [
                    label,
                    f"{p50:.2f}",
                    f"{max(samples):.2f}",
                    f"{value:,}" if isinstance(value, int) else str(value),
                    "met" if p50 < 10 else "MISSED",
                ]
            )
        out(
            report.table(["gauge", "p50 ms", "max ms", "value", "< 10 ms (p50)"], daemon_rows)
            + "\n",
            flush=True,
        )
    if args.tune:
        say("tune: batch settings on B1")
        t = server.seed("tune", scenarios.seed_requests(B1_ROWS, 2, 3))
        settings_list: list[dict[str, Any]] = [
            {"batch_size": n, "batch_target_seconds": tgt}
            for tgt in ("50ms", "30ms")
            for n in (5000, 10000, 20000, 50000)
        ] + [{"batch_size": 20000, "batch_target_seconds": "50ms", "synchronous_commit": True}]
        res = scenarios.tune(server, t, settings_list, say=say)
        server.release(t)
        out("## Tuning: reaper's sweep on B1 at several settings\n")
        out(report.runs_table([r for _, r in res]) + "\n", flush=True)
        if template is not None:
            res = scenarios.tune(
                server,
                template,
                [{"batch_size": n, "strategy": "index"} for n in (5000, 10000, 20000, 50000)],
                say=say,
            )
            out("## Tuning: index batches on B3 (10,000 scattered)\n")
            out(report.runs_table([r for _, r in res]) + "\n", flush=True)
    if template is not None:
        server.release(template)
    if "B6" in only:
        say("B6: replica lag")
        reason = replica_unavailable()
        out("## B6 replica lag: a standby's replay paused during a 2,000,000-row sweep\n")
        if reason:
            out(f"Not run: {reason}.\n", flush=True)
        else:
            b6 = scenarios.replica_lag(B6_ROWS, B6_MAX_LAG_SECONDS, B6_HOLD_SECONDS, say=say)
            out(replica_table(b6) + "\n", flush=True)
    if "B7" in only:
        out(b7.run(server, say=say), flush=True)  # partition retention (python -m bench.b7)
    if "B8" in only:
        say("B8: near-total deletes")  # python -m bench.b8
        out(
            b8.run(server, args.b8_rows, args.b8_rounds, say=say, variants=args.b8_variants),
            flush=True,
        )
    if args.crossover:
        say("crossover: heap vs index by garbage fraction")
        fr = [(1, 1000), (1, 200), (1, 100), (1, 50), (1, 20), (1, 10), (1, 5)]
        res2 = scenarios.crossover(server, B1_ROWS, fr, say=say)
        out("## Crossover: heap walk vs index batches, 2,000,000 requests\n")
        out(
            report.table(
                [
                    "garbage fraction",
                    "rows",
                    "heap s",
                    "index s",
                    "index/heap",
                    "heap p99 ms",
                    "index p99 ms",
                ],
                [
                    [
                        f"{f:.1%}",
                        f"{h.rows:,}",
                        f"{h.seconds:.2f}",
                        f"{i.seconds:.2f}",
                        f"{i.seconds / h.seconds:.2f}",
                        f"{percentile(h.batch_seconds, 0.99) * 1000:.0f}",
                        f"{percentile(i.batch_seconds, 0.99) * 1000:.0f}",
                    ]
                    for f, h, i in res2
                ],
            )
            + "\n",
            flush=True,
        )


def replica_unavailable() -> str | None:
    from bench import replica

    return replica.why_unavailable()


def b4_verdict(results: list[tuple[Run, scenarios.Traffic, int]]) -> str:
    """The paced and the unpaced sweeps of the same run side by side (medians of their
    rounds), against the targets: live p99 during the paced sweep <= 1.5x before it, and the
    paced sweep <= 2x the unpaced one's time."""
    by: dict[str, list[tuple[float, float, float, float, float]]] = {}
    lost_total = 0
    # Every round's latencies pooled: the "before" of every round (the same clients, no
    # sweep), and the "during" of each variant's rounds.
    pooled_before: list[float] = []
    pooled_during: dict[str, list[float]] = {}
    for run, traffic, lost in results:
        if run.variant not in (scenarios.PACED, scenarios.UNPACED):
            continue
        lv_b = traffic.latencies.get(("live", "before"), [])
        lv_d = traffic.latencies.get(("live", "during"), [])
        pooled_before += lv_b
        pooled_during.setdefault(run.variant, []).extend(lv_d)
        throttled = run.extra.get("throttled") or {}
        by.setdefault(run.variant, []).append(
            (
                run.seconds,
                percentile(lv_b, 0.99),
                percentile(lv_d, 0.99),
                percentile(lv_d, 0.99) / percentile(lv_b, 0.99),
                throttled.get("load") or 0.0,
            )
        )
        lost_total += lost
    if scenarios.PACED not in by or scenarios.UNPACED not in by:
        return "Targets: not measured (the paced and the unpaced sweep both run by default)."

    def med(variant: str, i: int) -> float:
        return statistics.median(r[i] for r in by[variant])

    paced, unpaced = scenarios.PACED, scenarios.UNPACED
    ratio = med(paced, 0) / med(unpaced, 0)
    p99x = med(paced, 3)
    rows = [
        [
            label,
            f"{med(v, 0):.2f}",
            f"{med(v, 1) * 1000:.1f}",
            f"{med(v, 2) * 1000:.1f}",
            f"{med(v, 3):.2f}x",
            f"{med(v, 4):.2f}",
            ", ".join(f"{r[0]:.2f} s / {r[3]:.2f}x" for r in by[v]),
        ]
        for label, v in (("paced (defaults)", paced), ("unpaced (busy_share 1)", unpaced))
    ]
    table = report.table(
        [
            "sweep",
            "wall s",
            "live p99 ms before",
            "live p99 ms during",
            "p99 during/before",
            "waited for load s",
            "rounds (wall / p99 ratio)",
        ],
        rows,
    )
    before99 = percentile(pooled_before, 0.99)
    pooled = {v: percentile(pooled_during.get(v, []), 0.99) / before99 for v in (paced, unpaced)}
    return (
        table + f"\n\nMedians of {len(by[paced])} rounds, paced and unpaced in turn. "
        f"Targets: live p99 during the paced sweep {p99x:.2f}x before it (target <= 1.5x: "
        f"{'met' if p99x <= 1.5 else 'MISSED'}); paced sweep {ratio:.2f}x the unpaced one "
        f"(target <= 2x: {'met' if ratio <= 2 else 'MISSED'}); {lost_total} refreshed "
        "members deleted (target 0). A round's p99 rests on about 3 s of statements "
        "before its sweep and 1-2 s during it, so it swings between rounds; pooled over "
        f"every round ({len(pooled_before):,} statements before the sweeps, p99 "
        f"{before99 * 1000:.1f} ms), the p99 during the paced sweeps is "
        f"{pooled[paced]:.2f}x it (target <= 1.5x: "
        f"{'met' if pooled[paced] <= 1.5 else 'MISSED'}), during the unpaced ones "
        f"{pooled[unpaced]:.2f}x."
    )


def wal_table(runs: list[scenarios.WalRun]) -> str:
    from reaper.engine.pacing import BUSY_SAMPLE_AGE_SECONDS
    from reaper.engine.walbrake import WAL_BURST_SECONDS

    # What the brake allows by design: the limit over the sweep's time, its burst, and the
    # WAL of the batches between two samples at the unbraked rate (the brake sees the WAL a
    # sample late; the run's last batch is never waited after).
    unbraked = max((r.rate for r in runs if r.limit is None), default=0.0)

    def allowed(r: scenarios.WalRun) -> float:
        assert r.limit is not None
        return r.limit * (r.run.seconds + WAL_BURST_SECONDS) + unbraked * BUSY_SAMPLE_AGE_SECONDS

    rows = [
        [
            r.run.variant,
            f"{r.run.rows:,}",
            f"{r.run.seconds:.2f}",
            f"{r.wal_bytes / 1e6:.0f}",
            f"{r.rate / 1e6:.1f}",
            f"{(r.run.extra.get('throttled') or {}).get('wal') or 0.0:.2f}",
            "-" if r.limit is None else f"{allowed(r) / 1e6:.0f}",
            "-" if r.limit is None else ("met" if r.wal_bytes <= allowed(r) else "MISSED"),
        ]
        for r in runs
    ]
    return report.table(
        [
            "sweep",
            "rows deleted",
            "wall s",
            "WAL MB (server)",
            "WAL MB/s",
            "waited for WAL s",
            "WAL MB the brake allows",
            "within it",
        ],
        rows,
    ) + (
        f"\n\nThe brake allows the limit over the sweep's time plus its burst "
        f"({WAL_BURST_SECONDS:g} s of the limit) and what the unbraked sweep writes in "
        f"{BUSY_SAMPLE_AGE_SECONDS:g} s (it reads the server's WAL position once per sample); "
        "over a longer sweep the rate converges to the limit."
    )


def replica_table(r: scenarios.ReplicaLagRun) -> str:
    throttled = (r.run.extra.get("throttled") or {}).get("replica_lag") or 0.0
    halted = "-" if r.halted_after is None else f"{r.halted_after:.2f}"
    table = report.table(
        [
            "rows deleted",
            "wall s",
            "max_replica_lag s",
            "replay paused s",
            "last batch before the halt, s after the pause",
            "batches ended past the limit",
            "rows deleted before resume",
            "peak lag s",
            "throttled s (replica_lag)",
            "stopped_by",
        ],
        [
            [
                f"{r.run.rows:,}",
                f"{r.run.seconds:.2f}",
                f"{r.max_lag:g}",
                f"{r.resumed_at - r.paused_at:.2f}",
                halted,
                str(r.batches_past_limit),
                f"{r.rows_before_resume:,}",
                f"{r.peak_lag:.2f}",
                f"{throttled:.2f}",
                str(r.run.extra.get("stopped_by")),
            ]
        ],
    )
    ok = r.batches_past_limit <= 1 and r.run.extra.get("stopped_by") == "done"
    return (
        table + f"\n\nTarget: reaper stops within one batch of max_replica_lag and finishes "
        f"after the replay resumes: {'met' if ok else 'MISSED'} "
        f"({r.batches_past_limit} batch(es) ended after the lag passed the limit)."
    )


def b1_verdict(runs: list[Run]) -> str:
    a, b, c = runs[0], runs[1], runs[2]
    p99 = percentile(c.batch_seconds, 0.99)
    text = (
        f"Targets: (c)/(a) = {c.seconds / a.seconds:.2f}x (target <= 1.25x); "
        f"(b)/(c) = {b.seconds / c.seconds:.2f}x (target >= 3x); "
        f"(c) batch p99 = {p99 * 1000:.0f} ms (target <= 100 ms)."
    )
    waited = (c.extra.get("throttled") or {}).get("load")
    if waited is not None:
        text += f" (c) waited {waited:.2f} s for live traffic (none runs here: target 0)."
    if len(runs) > 3:
        d = runs[3]
        text += (
            f" Plain block ranges without row locks (d) take "
            f"{d.seconds / a.seconds:.2f}x (a); (c)/(d) = {c.seconds / d.seconds:.2f}x."
        )
    for r in runs[4:]:
        if r.variant.startswith("i."):
            continue
        cpu = (
            f", server CPU {r.backend_cpu / c.backend_cpu:.2f}x (c)'s"
            if r.backend_cpu and c.backend_cpu and "--parallel" not in r.variant
            else ""
        )
        text += f" ({r.variant[0]}) {r.variant[3:]}: {r.seconds / c.seconds:.2f}x (c){cpu}."
    text += " " + parallel_verdict(runs)
    rounds = [r.extra.get("rounds", []) for r in runs]
    if len(rounds[0]) > 1:
        each = ", ".join(
            f"{r[0]}: " + " / ".join(f"{x:.2f}" for x in seconds)
            for r, seconds in zip((r.variant for r in runs), rounds, strict=True)
        )
        ratios = " / ".join(
            f"{cs / as_:.2f}x" for as_, cs in zip(rounds[0], rounds[2], strict=True)
        )
        text += (
            f" Each variant's median of {len(rounds[0])} interleaved rounds is shown "
            f"(s per round: {each}); (c)/(a) round by round: {ratios}."
        )
    return text


def parallel_verdict(runs: list[Run]) -> str:
    """B1's parallel heap ranges: each reaper variant's time against one plain DELETE (a),
    and its WAL per row against (a)'s; the target is --parallel 2's."""
    a, c = runs[0], runs[2]

    def wal(r: Run) -> str:
        return f"{r.wal_bytes / r.rows:.0f} B" if r.wal_bytes and r.rows else "?"

    def name(r: Run) -> str:
        return f"--parallel {DEFAULT_PARALLEL}" if r is c else r.variant.split(", ")[1]

    shown = sorted([c] + [r for r in runs[4:] if "--parallel" in r.variant], key=name)
    each = "; ".join(
        f"({r.variant[0]}) {name(r)} {r.seconds / a.seconds:.2f}x (a), WAL {wal(r)} per row"
        for r in shown
    )
    two = next((r for r in shown if name(r) == "--parallel 2"), None)
    verdict = (
        ""
        if two is None
        else (
            f" Target: ({two.variant[0]}) at --parallel 2 <= {PARALLEL_TARGET}x (a): "
            f"{'met' if two.seconds / a.seconds <= PARALLEL_TARGET else 'MISSED'}."
        )
    )
    split = next((r for r in runs if r.variant.startswith("i.")), None)
    ceiling = (
        ""
        if split is None
        else (
            f" The ceiling on this machine: (i) {split.variant[3:]},"
            f" {split.seconds / a.seconds:.2f}x"
            f" (a), WAL {wal(split)} per row"
            + ("" if two is None else f"; --parallel 2 is {two.seconds / split.seconds:.2f}x (i)")
            + "."
        )
    )
    return f"Parallel heap ranges: {each}; (a) WAL {wal(a)} per row.{verdict}{ceiling}"


def scaling_table(scaling: list[tuple[int, list[Run]]]) -> str:
    rows = []
    for size, runs in scaling:
        by = {r.variant[0]: r for r in runs}
        a, c = by["a"], by["c"]
        b = by.get("b")
        rows.append(
            [
                f"{size:,}",
                f"{c.rows:,}",
                f"{a.seconds:.2f}",
                "-"
                if b is None
                else f"{b.seconds:.2f}" + (f" ({b.note}, {b.rows:,} rows)" if b.note else ""),
                f"{c.seconds:.2f}",
                f"{c.seconds / a.seconds:.2f}x",
                f"{a.seconds / a.rows * 1e6:.2f}",
                f"{c.seconds / c.rows * 1e6:.2f}",
                "-" if b is None else f"{b.seconds / b.rows * 1e6:.2f}",
                f"{percentile(c.batch_seconds, 0.99) * 1000:.0f}",
                f"{(c.rss_peak_kib or 0) / 1024:.0f}",
                f"{(a.wal_bytes or 0) / 2**20:,.0f} / {(c.wal_bytes or 0) / 2**20:,.0f}",
                f"{a.checkpoints} / {c.checkpoints}",
            ]
        )
    return report.table(
        [
            "table rows",
            "garbage",
            "(a) s",
            "(b) s",
            "(c) s",
            "(c)/(a)",
            "(a) s per M rows",
            "(c) s per M rows",
            "(b) s per M rows",
            "(c) p99 ms",
            "(c) peak RSS MiB",
            "WAL MiB (a) / (c)",
            "checkpoints (a) / (c)",
        ],
        rows,
    )


def traffic_table(results: list[tuple[Run, scenarios.Traffic, int]]) -> str:
    rows = []
    for run, traffic, lost in results:
        lv_b = traffic.latencies.get(("live", "before"), [])
        lv_d = traffic.latencies.get(("live", "during"), [])
        ed = traffic.latencies.get(("edge", "during"), [])
        rows.append(
            [
                run.variant + (f" ({run.strategy})" if run.strategy else ""),
                f"{run.rows:,}",
                f"{run.seconds:.2f}",
                f"{percentile(lv_b, 0.5) * 1000:.1f} / {percentile(lv_b, 0.99) * 1000:.1f}",
                f"{percentile(lv_d, 0.5) * 1000:.1f} / {percentile(lv_d, 0.99) * 1000:.1f}",
                f"{percentile(lv_d, 0.99) / percentile(lv_b, 0.99):.2f}x",
                f"{percentile(ed, 0.5) * 1000:.1f} / {percentile(ed, 0.99) * 1000:.1f} / "
                f"{max(ed, default=0) * 1000:.0f}",
                f"{len(lv_d) + len(ed):,}",
                f"{len(traffic.refreshed):,}",
                str(lost),
            ]
        )
    return report.table(
        [
            "variant",
            "rows deleted",
            "wall s",
            "live p50/p99 ms before",
            "live p50/p99 ms during",
            "p99 during/before",
            "edge p50/p99/max ms during",
            "refreshes during",
            "members refreshed",
            "refreshed and deleted",
        ],
        rows,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
