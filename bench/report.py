"""Markdown tables of the benchmark's figures."""

from __future__ import annotations

import math
from typing import Any

from bench.variants import Run, percentile


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:.0f}" if x >= 0.0095 else f"{x * 1000:.1f}"


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f}"


def _growth(kib: int) -> str:
    return f"{kib / 1024:+.1f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def runs_table(runs: list[Run]) -> str:
    """Variant rows: wall seconds, rows/s, ratio to (a), batch p50/p99/max, peak RSS."""
    base = runs[0].seconds if runs and runs[0].variant.startswith("a.") else math.nan
    rows = []
    for r in runs:
        b = r.batch_seconds
        rss = (
            "-"
            if r.rss_peak_kib is None
            else (f"{_mib(r.rss_peak_kib)} ({_growth(r.rss_peak_kib - (r.rss_before_kib or 0))})")
        )
        rows.append(
            [
                r.variant + (f" ({r.strategy})" if r.strategy else ""),
                f"{r.rows:,}",
                f"{r.seconds:.2f}",
                f"{r.rows / r.seconds:,.0f}" if r.seconds else "-",
                "-" if math.isnan(base) else f"{r.seconds / base:.2f}x",
                "-" if r.backend_cpu is None else f"{r.backend_cpu:.2f}",
                f"{len(b):,}",
                _ms(percentile(b, 0.5)),
                _ms(percentile(b, 0.99)),
                _ms(max(b) if b else math.nan),
                rss,
                "-" if r.wal_bytes is None else f"{r.wal_bytes / 2**20:,.0f}",
                "-" if r.checkpoints is None else str(r.checkpoints),
                r.note,
            ]
        )
    return table(
        [
            "variant",
            "rows deleted",
            "wall s",
            "rows/s",
            "vs (a)",
            "server CPU s",
            "batches",
            "batch p50 ms",
            "p99 ms",
            "max ms",
            "peak RSS MiB (growth)",
            "WAL MiB",
            "checkpoints",
            "note",
        ],
        rows,
    )


def settings_label(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
