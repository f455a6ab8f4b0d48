"""A sweep's predicate, checked on a session: the engine's one way from a :class:`Sweep` to
the :class:`reaper.sqltext.predicates.CheckedPredicate` its statements are composed from."""

from __future__ import annotations

from reaper.config.sweeps import Sweep
from reaper.db import Session
from reaper.sqltext.predicates import CheckedPredicate


def sweep_label(sweep: Sweep) -> str:
    """How an error names the sweep: ``sweep nodes_silent`` (built in) or ``[sweeps.mine]``
    (declared in the config file)."""
    return f"sweep {sweep.name}" if sweep.builtin else f"[sweeps.{sweep.name}]"


def check_predicate(session: Session, sweep: Sweep) -> CheckedPredicate:
    """``sweep``'s predicate and ``since`` checked by :meth:`reaper.db.Session.check_predicate`.

    Raises:
        PredicateRefused: one line naming the sweep and the offending part.
        DatabaseError: the catalog could not be read.
    """
    return session.check_predicate(
        sweep.table, sweep.predicate, list(sweep.retentions), sweep.since,
        label=sweep_label(sweep),
    )
