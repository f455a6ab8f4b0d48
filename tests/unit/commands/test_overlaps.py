"""Which sweeps of one table `reaper check` names as overlapping: their rules can match one
row and their retentions differ, decided from the declarations alone."""

from __future__ import annotations

from typing import Any

from reaper.commands.overlaps import overlaps
from reaper.config.settings import build_settings
from reaper.config.sweeps import Sweep, configured_sweeps

OFF = {
    n: {"enabled": False}
    for n in (
        "nodes_session",
        "nodes_silent",
        "nodes_ephemeral",
        "router_leases",
        "enrollment_requests",
        "enrollment_requests_ephemeral",
        "bootstrap_tokens",
    )
}


def messages(retention: str, **rule: Any) -> dict[str, Any]:
    return {
        "table": "public.messages",
        "reason": "old",
        "retention": retention,
        "age": "created_at",
        **rule,
    }


def declared(**sweeps: dict[str, Any]) -> list[Sweep]:
    settings = build_settings({"dsn": "postgresql://x@127.0.0.1:1/x"}, {"sweeps": sweeps})
    return [s for s in configured_sweeps(settings) if s.enabled or not s.builtin]


def pairs(sweeps: list[Sweep]) -> list[tuple[str, str, bool]]:
    return [(o.shorter.name, o.longer.name, o.exception) for o in overlaps(sweeps)]


def test_a_broad_short_sweep_deletes_what_a_narrow_long_one_keeps() -> None:
    found = declared(
        all_old=messages("30d"),
        legal=messages("365d", where={"channel": "legal"}),
    )
    assert pairs(found) == [("all_old", "legal", False)]
    (o,) = overlaps(found)
    assert "legal's 365d holds for none of them" in o.detail()
    assert "[sweeps.all_old]" in o.fix()


def test_filters_that_exclude_each_other_do_not_overlap() -> None:
    assert not pairs(
        declared(
            chat=messages("30d", where={"channel": "chat"}),
            legal=messages("365d", where={"channel": "legal"}),
        )
    )
    assert not pairs(
        declared(
            rest=messages("30d", where_not={"channel": "legal"}),
            legal=messages("365d", where={"channel": "legal"}),
        )
    )


def test_a_narrower_shorter_sweep_is_an_exception() -> None:
    found = declared(
        spam=messages("7d", where={"channel": "spam"}),
        all_old=messages("365d"),
    )
    assert pairs(found) == [("spam", "all_old", True)]


def test_same_retention_or_other_tables_do_not_count() -> None:
    assert not pairs(declared(a=messages("30d"), b=messages("30d", where={"channel": "x"})))
    other = {**messages("10d"), "table": "public.other"}
    assert not pairs(declared(a=messages("30d"), b=other))


def test_built_in_sweeps_overlap_by_design() -> None:
    settings = build_settings({"dsn": "postgresql://x@127.0.0.1:1/x"})
    assert not pairs(configured_sweeps(settings))


def test_a_declared_sweep_beside_a_built_in_one() -> None:
    nodes = {
        "table": "public.nodes",
        "reason": "x",
        "retention": "400d",
        "age": "enrolled_at",
    }
    settings = build_settings({"dsn": "postgresql://x@127.0.0.1:1/x"}, {"sweeps": {"keep": nodes}})
    found = [s for s in configured_sweeps(settings) if s.enabled]
    assert ("nodes_silent", "keep", False) in pairs(found)
