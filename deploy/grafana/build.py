"""Write deploy/grafana/reaper.json, reaper's Grafana dashboard, from the panel list below.

    python deploy/grafana/build.py          # rewrite reaper.json (make deploy-generate)
    python deploy/grafana/build.py --check  # exit 1 when reaper.json is out of date

The dashboard imports as is (Dashboards > New > Import) and loads through Grafana's
dashboard sidecar (the ConfigMap deploy/kubernetes/grafana/, written by deploy/generate.py):
its data source is a variable, never an import-time input. Every query names only metrics
reaper exports; tests/unit/project/test_grafana.py checks them against reaper.metrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "reaper.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", sweep=~"$sweep"'
# ReaperSweepStalled: no success for 3 h (then 30 min more): the panel's red line.
STALL_WINDOW_SECONDS = 3 * 3600


def target(expr: str, legend: str, ref: str = "A") -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}


def panel(
    pid: int,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    *,
    unit: str,
    x: int,
    y: int,
    w: int = 12,
    h: int = 8,
    kind: str = "timeseries",
    thresholds: list[dict[str, Any]] | None = None,
    draw: str = "line",
) -> dict[str, Any]:
    custom: dict[str, Any] = {"drawStyle": draw, "fillOpacity": 10, "showPoints": "never"}
    if draw == "bars":
        custom.update(fillOpacity=80, stacking={"mode": "normal", "group": "A"})
    defaults: dict[str, Any] = {"unit": unit}
    if kind == "timeseries":
        defaults["custom"] = custom
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
        if kind == "timeseries":
            custom["thresholdsStyle"] = {"mode": "line"}
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "right",
                "calcs": ["lastNotNull", "max"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
    }


def row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def panels() -> list[dict[str, Any]]:
    red = [{"color": "green", "value": None}, {"color": "red", "value": STALL_WINDOW_SECONDS}]
    return [
        row(100, "What reaper deletes", 0),
        panel(
            1,
            "Rows deleted per second, by table and reason",
            "rate(reaper_deleted_rows_total): what the sweeps remove. Flat at 0 for hours "
            "while a table grows: ReaperDeletingNothing.",
            [
                target(
                    'sum by (table, reason) (rate(reaper_deleted_rows_total{job=~"$job"}'
                    "[$__rate_interval]))",
                    "{{table}} {{reason}}",
                )
            ],
            unit="rowsps",
            x=0,
            y=1,
        ),
        panel(
            2,
            "Table rows (catalog estimate)",
            "reaper_storage_rows: pg_class.reltuples of each swept table, refreshed every "
            "--gauge-interval.",
            [target('max by (table) (reaper_storage_rows{job=~"$job"})', "{{table}}")],
            unit="short",
            x=12,
            y=1,
        ),
        panel(
            3,
            "Backlog: rows eligible now, per sweep",
            "reaper_backlog_rows, capped at --backlog-limit. Rising hour over hour while runs "
            "succeed: ReaperBacklogGrowing.",
            [target(f"max by (sweep) (reaper_backlog_rows{{{SEL}}})", "{{sweep}}")],
            unit="short",
            x=0,
            y=9,
        ),
        panel(
            4,
            "Oldest eligible row, past its cutoff",
            "reaper_backlog_oldest_seconds: how long the oldest row a sweep would delete "
            "has been garbage. Steadily aging: ReaperBacklogGrowing.",
            [target(f"max by (sweep) (reaper_backlog_oldest_seconds{{{SEL}}})", "{{sweep}}")],
            unit="s",
            x=12,
            y=9,
        ),
        row(101, "Runs", 17),
        panel(
            5,
            "Run outcomes",
            "increase(reaper_sweep_runs_total) by outcome: success, failure, refused "
            "(stopped on purpose before its first delete), skipped (another replica held the "
            "sweep's lock). Failures that keep coming: ReaperSweepFailing; refusals: "
            "ReaperSweepRefused.",
            [
                target(
                    f"sum by (sweep, outcome) (increase(reaper_sweep_runs_total{{{SEL}}}"
                    "[$__rate_interval]))",
                    "{{sweep}} {{outcome}}",
                )
            ],
            unit="short",
            x=0,
            y=18,
            draw="bars",
        ),
        panel(
            6,
            "Since the last successful run",
            "time() - reaper_sweep_last_success_timestamp_seconds, across replicas. Above "
            "the red line (3 h) for 30 minutes more: ReaperSweepStalled.",
            [
                target(
                    f"time() - max by (sweep) (reaper_sweep_last_success_timestamp_seconds"
                    f"{{{SEL}}} > 0)",
                    "{{sweep}}",
                )
            ],
            unit="s",
            x=12,
            y=18,
            thresholds=red,
        ),
        panel(
            7,
            "Batch duration (p50, p99)",
            "histogram_quantile over reaper_batch_duration_seconds: one batch transaction. "
            "Near statement_timeout (10 s): lower the sweep's batch_size.",
            [
                target(
                    "histogram_quantile(0.5, sum by (sweep, le) (rate("
                    f"reaper_batch_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                    "p50 {{sweep}}",
                    "A",
                ),
                target(
                    "histogram_quantile(0.99, sum by (sweep, le) (rate("
                    f"reaper_batch_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                    "p99 {{sweep}}",
                    "B",
                ),
            ],
            unit="s",
            x=0,
            y=26,
        ),
        panel(
            8,
            "Time throttled, by reason",
            "rate(reaper_throttled_seconds_total): the share of time a sweep waited between "
            "batches for replica lag or load (1 = all the time).",
            [
                target(
                    f"sum by (sweep, reason) (rate(reaper_throttled_seconds_total{{{SEL}}}"
                    "[$__rate_interval]))",
                    "{{sweep}} {{reason}}",
                )
            ],
            unit="percentunit",
            x=12,
            y=26,
        ),
        panel(
            9,
            "Run duration (p50, p99)",
            "histogram_quantile over reaper_sweep_duration_seconds: a whole run.",
            [
                target(
                    "histogram_quantile(0.5, sum by (sweep, le) (rate("
                    f"reaper_sweep_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                    "p50 {{sweep}}",
                    "A",
                ),
                target(
                    "histogram_quantile(0.99, sum by (sweep, le) (rate("
                    f"reaper_sweep_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                    "p99 {{sweep}}",
                    "B",
                ),
            ],
            unit="s",
            x=0,
            y=34,
        ),
        panel(
            11,
            "Rows left although eligible, by table and reason",
            "rate(reaper_skipped_rows_total): rows a sweep left (locked by a writer, a delete "
            "past statement_timeout, a foreign key). Locked rows go next run; the others need "
            "a look (the log names them).",
            [
                target(
                    'sum by (table, reason) (rate(reaper_skipped_rows_total{job=~"$job"}'
                    "[$__rate_interval]))",
                    "{{table}} {{reason}}",
                )
            ],
            unit="rowsps",
            x=0,
            y=42,
        ),
        panel(
            12,
            "Partitions removed",
            "increase(reaper_dropped_partitions_total): partitions wholly past the cutoff, "
            "dropped (or detached) instead of deleted row by row.",
            [
                target(
                    'sum by (table) (increase(reaper_dropped_partitions_total{job=~"$job"}'
                    "[$__rate_interval]))",
                    "{{table}}",
                )
            ],
            unit="short",
            x=12,
            y=42,
            draw="bars",
        ),
        panel(
            10,
            "Failing checks",
            "reaper_check_failures: failing findings of the last `reaper check` the daemon "
            'ran, by sweep and check (sweep="*": server and connection).',
            [
                target(
                    'sum by (sweep, check) (reaper_check_failures{job=~"$job"}) > 0',
                    "{{sweep}} {{check}}",
                )
            ],
            unit="short",
            x=12,
            y=34,
        ),
        row(102, "Space, clocks and reaper itself", 50),
        panel(
            13,
            "Dead rows and autovacuum's threshold, by table",
            "reaper_dead_rows (n_dead_tup) against reaper_autovacuum_threshold_rows: deleted "
            "rows whose space is not reusable yet. Above the threshold for an hour: "
            "ReaperSpaceNotReclaimed.",
            [
                target('max by (table) (reaper_dead_rows{job=~"$job"})', "dead {{table}}", "A"),
                target(
                    'max by (table) (reaper_autovacuum_threshold_rows{job=~"$job"})',
                    "threshold {{table}}",
                    "B",
                ),
            ],
            unit="short",
            x=0,
            y=51,
        ),
        panel(
            14,
            "Since the last vacuum, by table",
            "time() - reaper_last_vacuum_timestamp_seconds: the latest VACUUM or autovacuum "
            "of each swept table (0, never, is left out).",
            [
                target(
                    'time() - max by (table) (reaper_last_vacuum_timestamp_seconds{job=~"$job"} '
                    "> 0)",
                    "{{table}}",
                )
            ],
            unit="s",
            x=12,
            y=51,
        ),
        panel(
            15,
            "xmin horizon: the oldest holder's age, in transactions",
            "reaper_xmin_horizon_age_transactions by kind of holder: a vacuum removes no row "
            "deleted after it. Rising without end: ReaperSpaceNotReclaimed names the holder.",
            [
                target(
                    'max by (holder) (reaper_xmin_horizon_age_transactions{job=~"$job"})',
                    "{{holder}}",
                )
            ],
            unit="short",
            x=0,
            y=59,
        ),
        panel(
            16,
            "xmin horizon: how long the oldest transaction has been open",
            "reaper_xmin_horizon_age_seconds: the oldest open (or prepared) transaction "
            "holding the horizon, where reaper's role may see its start.",
            [
                target(
                    'max by (holder) (reaper_xmin_horizon_age_seconds{job=~"$job"})',
                    "{{holder}}",
                )
            ],
            unit="s",
            x=12,
            y=59,
        ),
        panel(
            17,
            "Clock skew: database minus reaper's host",
            "reaper_clock_skew_seconds at the last run's reading; the red lines are 5 minutes "
            "either way, ReaperClockSkew's bound.",
            [target('reaper_clock_skew_seconds{job=~"$job"}', "{{instance}}")],
            unit="s",
            x=0,
            y=67,
            thresholds=[
                {"color": "red", "value": None},
                {"color": "green", "value": -300},
                {"color": "red", "value": 300},
            ],
        ),
        panel(
            18,
            "Runs refused by the clock check",
            "increase(reaper_clock_refusals_total) by sweep and clock (host, history): runs "
            "stopped before their first delete: ReaperClockSkew.",
            [
                target(
                    f"sum by (sweep, clock) (increase(reaper_clock_refusals_total{{{SEL}}}"
                    "[$__rate_interval]))",
                    "{{sweep}} {{clock}}",
                )
            ],
            unit="short",
            x=12,
            y=67,
            draw="bars",
        ),
        panel(
            19,
            "Database answers",
            "reaper_database_up: 1 when the database answered reaper's last readiness probe. "
            "0 while it is unreachable (/readyz answers 503 then).",
            [target('reaper_database_up{job=~"$job"}', "{{instance}}")],
            unit="short",
            x=0,
            y=75,
            w=8,
            kind="stat",
            thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
        ),
        panel(
            20,
            "Last configuration reload",
            "reaper_config_last_reload_successful (0: the last SIGHUP's file was rejected, the "
            "running settings stay; the log says why), and the age of the last good load "
            "(reaper_config_last_reload_success_timestamp_seconds).",
            [
                target(
                    'reaper_config_last_reload_successful{job=~"$job"}',
                    "ok {{instance}}",
                    "A",
                ),
                target(
                    'time() - reaper_config_last_reload_success_timestamp_seconds{job=~"$job"}',
                    "since {{instance}}",
                    "B",
                ),
            ],
            unit="short",
            x=8,
            y=75,
            w=8,
            kind="stat",
            thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
        ),
        panel(
            21,
            "Versions",
            "reaper_build_info: reaper, Python, psycopg and the PostgreSQL server each replica "
            "runs with.",
            [
                target(
                    "count by (version, python, psycopg, postgresql) "
                    '(reaper_build_info{job=~"$job"})',
                    "reaper {{version}}, Python {{python}}, psycopg {{psycopg}}, PostgreSQL "
                    "{{postgresql}}",
                )
            ],
            unit="short",
            x=16,
            y=75,
            w=8,
            kind="stat",
        ),
    ]


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schemaVersion 39, Grafana 10 and later)."""
    return {
        "uid": "reaper",
        "title": "reaper",
        "description": "What reaper deletes from PostgreSQL, how its sweeps run, and what "
        "each alert watches.",
        "tags": ["reaper", "postgresql"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "1m",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-24h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "refresh": 1,
                    "hide": 0,
                    "current": {"selected": False, "text": "default", "value": "default"},
                },
                variable("job", "Job", "label_values(reaper_sweep_runs_total, job)"),
                variable(
                    "sweep", "Sweep", 'label_values(reaper_sweep_runs_total{job=~"$job"}, sweep)'
                ),
            ]
        },
        "annotations": {"list": []},
        "links": [],
        "panels": panels(),
    }


def render() -> str:
    """The JSON text written to reaper.json."""
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    """Write reaper.json, or with ``--check`` exit 1 when it differs."""
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run `make deploy-generate`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
