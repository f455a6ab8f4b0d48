"""The words reaper uses for its fixed sets of values, each set defined once.

Each set is a :class:`~enum.StrEnum`: a member *is* its string (``Outcome.SUCCESS ==
"success"``), so label values, JSON, log lines and ``repr`` read exactly as the plain strings
did. Compare against the members, never against string literals, so that a typo is a name
error rather than a silent mismatch.
"""

from __future__ import annotations

from enum import StrEnum, unique


class _Word(StrEnum):
    # A member prints as its string wherever it ends up: in a dict logged by the console
    # renderer, an assertion message or a repr() of a result, not as <Outcome.SUCCESS: ...>.
    __repr__ = str.__repr__


@unique
class Outcome(_Word):
    """How a sweep run ended (the ``outcome`` label of ``reaper_sweep_runs_total``)."""

    SUCCESS = "success"
    FAILURE = "failure"
    # Another session held the sweep's advisory lock: nothing was done.
    SKIPPED = "skipped"
    # A safety check stopped the run before its first delete (errors.Refusal).
    REFUSED = "refused"


# A run that ended on one of these did not do its work: run-once exits 1, the daemon backs off.
FAILED_OUTCOMES = (Outcome.FAILURE, Outcome.REFUSED)


@unique
class Projection(_Word):
    """What a dry run says of a sweep where its :class:`Outcome` would mislead: the real run
    would stop before its first delete (its full-table interlock or clock check refuses it).
    Shown in the table and in ``--json``; never a metric label."""

    REFUSED = "refused"


@unique
class StopReason(_Word):
    """Why a run's batch loop ended (``stopped_by`` in a result)."""

    # Nothing eligible was left.
    DONE = "done"
    # ``--max-rows-per-run`` / ``--max-seconds-per-run`` was spent with work left.
    MAX_ROWS = "max_rows"
    MAX_SECONDS = "max_seconds"
    # A stop was asked for (SIGTERM, SIGINT): the batch in flight finished first.
    STOP = "stop"
    # A standby stayed further behind than --max-replica-lag until the run's budget (or the
    # pacer's longest pause) ran out.
    REPLICA_LAG = "replica_lag"
    # The sweep's maintenance window (--window) closed with work left: the run resumes when
    # it opens again.
    WINDOW_CLOSED = "window_closed"


@unique
class ThrottleReason(_Word):
    """Why a sweep waited between batches (the ``reason`` label of
    ``reaper_throttled_seconds_total``)."""

    # A standby was further behind than --max-replica-lag.
    REPLICA_LAG = "replica_lag"
    # Other sessions used the database: batches kept to --busy-share of the wall time, or
    # less while their statements suffered.
    LOAD = "load"
    # The server's WAL grew faster than --max-wal-rate.
    WAL = "wal"


# A run that ended on one of these left a backlog behind it (a closed window's backlog waits
# for the window to open again).
BUDGET_STOPS = (StopReason.MAX_ROWS, StopReason.MAX_SECONDS, StopReason.WINDOW_CLOSED)


@unique
class Strategy(_Word):
    """How a run finds its victims (the ``strategy`` setting; ``strategy`` in a result)."""

    # Measure the garbage fraction on a sample and pick one of the two below.
    AUTO = "auto"
    # Walk the table front to back in ranges of heap blocks.
    HEAP = "heap"
    # Follow the predicate's index, a batch at a time.
    INDEX = "index"


@unique
class CheckStatus(_Word):
    """The verdict of one finding of ``reaper check``."""

    PASS = "pass"
    # Worth knowing, not a failure.
    WARN = "warn"
    FAIL = "fail"


@unique
class CheckName(_Word):
    """What one finding of ``reaper check`` is about (the ``check`` label of
    ``reaper_check_failures``)."""

    # About the server and the connection (labelled sweep="*").
    SERVER_VERSION = "server_version"
    ROLE = "role"
    ADVISORY_LOCK = "advisory_lock"
    PACING = "pacing"
    # About one sweep.
    TABLE = "table"
    COLUMNS = "columns"
    TIME_ZONE = "time_zone"
    PRIVILEGES = "privileges"
    INDEX = "index"
    FOREIGN_KEY_INDEX = "foreign_key_index"
    PLAN = "plan"
    PARTITIONS = "partitions"
    # Whether a batch's DELETE removes the rows it names (a trigger, a rule, row-level
    # security) and whether the role sees the rows at all.
    DELETES = "deletes"
    # Whether the space of deleted rows is reclaimed (reaper.commands.space): it only warns.
    SPACE = "space"
    # The rows ON DELETE CASCADE foreign keys take with the sweep's (reaper.commands.cascades):
    # it only warns.
    CASCADES = "cascades"
    # Two sweeps of one table whose rules can match the same rows but whose retentions differ:
    # the shorter deletes rows the longer keeps.
    OVERLAP = "overlap"


SERVER_CHECKS = (
    CheckName.SERVER_VERSION,
    CheckName.ROLE,
    CheckName.ADVISORY_LOCK,
    CheckName.PACING,
)
# The per-sweep checks whose reaper_check_failures series exist at 0 from the start.
# time_zone and space are not among them: they only ever warn, so they never count as failures.
SWEEP_CHECKS = (
    CheckName.TABLE,
    CheckName.COLUMNS,
    CheckName.PRIVILEGES,
    CheckName.INDEX,
    CheckName.FOREIGN_KEY_INDEX,
    CheckName.PLAN,
    CheckName.PARTITIONS,
    CheckName.OVERLAP,
    CheckName.DELETES,
)


@unique
class SkipReason(_Word):
    """Why an eligible row was left (the ``reason`` label of ``reaper_skipped_rows_total``)."""

    # A writer held the row: it is tried again next run.
    LOCKED = "locked"
    # Its delete alone ran past statement_timeout.
    TIMEOUT = "timeout"
    # A foreign key refused it (RESTRICT / NO ACTION from a table the sweep does not delete).
    FOREIGN_KEY = "foreign_key"
    # Another error (a trigger that raises, a check in a cascade).
    ERROR = "error"


@unique
class ObstacleKind(_Word):
    """What the catalog says can keep a DELETE from removing the rows it names
    (``sql/engine/delete_obstacles.sql``)."""

    # A BEFORE DELETE row trigger: one that returns NULL keeps the row (a soft delete).
    TRIGGER = "trigger"
    # A rule ON DELETE: it rewrites the DELETE into other statements.
    RULE = "rule"
    # Row-level security whose DELETE policies let the role reach fewer rows than it reads.
    POLICY = "policy"


@unique
class IndexStep(_Word):
    """What ``reaper indexes ensure`` does with one index (``action`` of its result)."""

    # Valid and ready: nothing to do.
    PRESENT = "present"
    # Absent: build it.
    CREATE = "create"
    # INVALID (an interrupted build): drop it concurrently and build it again.
    REBUILD = "rebuild"
    # The table is absent, or another session is building the index right now.
    SKIP = "skip"


@unique
class IndexOutcome(_Word):
    """How ``reaper indexes ensure`` ended for one index (``outcome`` of its result)."""

    DONE = "done"
    DRY_RUN = "dry_run"
    FAILED = "failed"
    # Nothing to do.
    NONE = "none"


@unique
class PartitionAction(_Word):
    """What a sweep does with a partition wholly past its cutoff (``partition_action``)."""

    # DETACH CONCURRENTLY, then DROP TABLE.
    DROP = "drop"
    # Keep it as a table of its own.
    DETACH = "detach"
    # Leave it to the batches.
    OFF = "off"


@unique
class PartitionStep(_Word):
    """What a run did (or a dry run would do) to one partition (``action`` of an entry of a
    result's ``partitions``): one of the :class:`PartitionAction` that remove it, or the
    finishing of a detach an earlier run left pending."""

    DROP = "drop"
    DETACH = "detach"
    FINALIZE_DETACH = "finalize_detach"


@unique
class RowsSource(_Word):
    """Where the rows of a removed partition come from (``rows_source`` of a result's
    ``partitions``)."""

    # Counted just before its detach.
    COUNT = "count"
    # The catalog's estimate (pg_class.reltuples): the partition was too large to count.
    ESTIMATE = "estimate"


@unique
class PartitionRefusal(_Word):
    """Why partitions wholly past the cutoff are left to the batches (``reaper check`` fails
    on :attr:`NOT_OWNER`, which only the owner can repair, and warns on the others)."""

    # The role does not own a partition (or its parent): detach and drop need ownership.
    NOT_OWNER = "not_owner"
    # Dropping would differ from deleting the rows (a foreign key, a trigger, a rule).
    OBSTACLE = "obstacle"
    # The drops would take (nearly) the whole table: the full-table interlock.
    FULL_TABLE = "full_table"


@unique
class ClockCheck(_Word):
    """Which second clock refused a run's database clock (``reaper_clock_refusals_total``'s
    ``clock`` label, :mod:`reaper.engine.clock`)."""

    # reaper's host clock, read around the database's now().
    HOST = "host"
    # The database clock's last reading by this process, advanced by its monotonic clock.
    HISTORY = "history"


@unique
class HorizonHolder(_Word):
    """What holds back the xmin horizon: a VACUUM removes no row deleted after the oldest
    snapshot still needed began (the ``holder`` label of ``reaper_xmin_horizon_age_*``)."""

    # A session of the database in a transaction (or running a statement).
    TRANSACTION = "transaction"
    # A PREPARE TRANSACTION not yet committed or rolled back.
    PREPARED_TRANSACTION = "prepared_transaction"
    # A replication slot's xmin (a standby's feedback through a physical slot).
    REPLICATION_SLOT = "replication_slot"
    # A standby's hot_standby_feedback without a slot.
    STANDBY = "standby"


@unique
class SpaceVerdict(_Word):
    """Whether a table's dead rows are being reclaimed (``reaper status``, ``reaper check``)."""

    # At most the dead rows past which autovacuum vacuums the table.
    OK = "ok"
    # A vacuum ran since the oldest snapshot began and left them: that snapshot holds them.
    HELD = "held"
    # Autovacuum may not run on the table (the server's autovacuum or track_counts is off, or
    # the table's autovacuum_enabled is false).
    AUTOVACUUM_OFF = "autovacuum_off"
    # Past the threshold, and no vacuum ran since what holds the horizon began: autovacuum
    # has not come to the table yet (or is vacuuming it now).
    AUTOVACUUM_BEHIND = "autovacuum_behind"
