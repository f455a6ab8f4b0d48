"""Helpers that the test_checks.py files of several layers share."""

from __future__ import annotations

from typing import Any


def failed(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (f["sweep"], f["check"], f["subject"]) for f in doc["findings"] if f["status"] == "fail"
    ]


def findings_of(doc: dict[str, Any], **match: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if all(f[k] == v for k, v in match.items())]
