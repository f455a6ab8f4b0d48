"""Settings: one frozen object, built once from flags > REAPER_* env > TOML file > defaults.

Every setting is declared once, in :mod:`reaper.config.declarations`; this module builds a
:class:`Settings` from the sources by those declarations, so a flag, its environment variable
and its TOML key always share one name and one value type. Nothing else in reaper reads
``os.environ``: components receive the values they need as keyword arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from reaper.config.declarations import (
    DEFAULT_BACKLOG_CAP,
    DEFAULT_BACKLOG_LIMIT,
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPHEMERAL_NODE_RETENTION,
    DEFAULT_MAX_CLOCK_SKEW,
    DEFAULT_MAX_ELIGIBLE_FRACTION,
    DEFAULT_NODE_RETENTION,
    DEFAULT_PARALLEL,
    DEFAULT_SESSION_RETENTION,
    FULL_TABLE_MIN_ROWS,
    MAX_PARALLEL,
    PerSweep,
    Settings,
)
from reaper.config.setting import Setting
from reaper.config.sweeptable import FIELDS, SweepSettings
from reaper.config.values import did_you_mean, keyed, shown
from reaper.errors import ConfigError

# Imported from here by the rest of reaper (the declarations live in their own module).
__all__ = [
    "DEFAULT_BACKLOG_CAP",
    "DEFAULT_BACKLOG_LIMIT",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_EPHEMERAL_NODE_RETENTION",
    "DEFAULT_MAX_CLOCK_SKEW",
    "DEFAULT_MAX_ELIGIBLE_FRACTION",
    "DEFAULT_NODE_RETENTION",
    "DEFAULT_PARALLEL",
    "DEFAULT_SESSION_RETENTION",
    "FULL_TABLE_MIN_ROWS",
    "MAX_PARALLEL",
    "PerSweep",
    "Settings",
    "SweepSettings",
    "build_settings",
    "builtin_keys",
    "changed_settings",
    "setting_keys",
    "sweep_keys",
]


def build_settings(
    explicit: Mapping[str, Any],
    file_values: Mapping[str, Any] | None = None,
    *,
    source: str = "config file",
    labels: Mapping[str, str] | None = None,
) -> Settings:
    """Build and validate :class:`Settings`.

    Args:
        explicit: values from flags or REAPER_* variables, by setting name; they win.
        labels: where an explicit value came from, by setting name (e.g.
            ``REAPER_NODE_RETENTION`` for a value from the environment); default its flag.
        file_values: the TOML file's top-level table (keys with ``_`` or ``-``); its
            ``[sweeps.NAME]`` tables become per-sweep overrides.
        source: how to name the file in error messages.

    Each given value's origin (its label, or ``FILE key NAME``) stays in the settings'
    ``origins``, so that an error found later names it too.

    Raises:
        ConfigError: an unknown key, a value that does not parse, or a rule that fails;
            the message names the setting, where it was given, and how to fix it.
    """
    declared = {s.name: s for s in Settings.declarations()}
    given: dict[str, tuple[Any, str]] = {}
    file_values = dict(file_values or {})
    sweeps_table = file_values.pop("sweeps", {})
    for key, raw in file_values.items():
        name = key.replace("-", "_")
        if name not in declared:
            raise ConfigError(
                f"{source}: unknown setting {shown(key)}"
                + (
                    did_you_mean(name, [*declared, "sweeps"])
                    or f"; known settings: {', '.join(sorted(declared))}"
                )
            )
        given[name] = (raw, f"{source} key {key}")
    for name, raw in explicit.items():
        given[name] = (raw, (labels or {}).get(name) or declared[name].flag)
    parsed: dict[str, Any] = {}
    for name, (raw, where) in given.items():
        setting = declared[name]
        try:
            parsed[name] = setting.parse(raw)
        except (ValueError, TypeError, OverflowError) as exc:
            expected = setting.expected
            if isinstance(raw, str):
                # Quotes matter in TOML, where a bare 9465 is a number; a flag is text anyway.
                expected = expected.replace(" in quotes", "")
            message = str(exc)
            # A message that ends in a question ("is it a typo?") is a sentence: the fix
            # starts another.
            joined = f"{message} Expected" if message.endswith("?") else f"{message}; expected"
            raise ConfigError(f"{where}: {joined} {expected}") from None
    return Settings(
        sweeps=parse_sweeps_table(sweeps_table, source),
        origins={name: where for name, (_, where) in given.items()},
        **parsed,
    ).validate()


def changed_settings(old: Settings, new: Settings) -> list[str]:
    """Names of the settings (and ``sweeps.NAME`` tables) whose values differ."""
    out = [s.name for s in Settings.declarations() if getattr(old, s.name) != getattr(new, s.name)]
    for name in sorted(set(old.sweeps) | set(new.sweeps)):
        if old.sweeps.get(name) != new.sweeps.get(name):
            out.append(f"sweeps.{name}")
    return out


SWEEP_NAME = re.compile(r"[a-z][a-z0-9_]*")


def setting_keys() -> tuple[Setting[Any], ...]:
    """The settings a ``[sweeps.NAME]`` table may set: those of :class:`PerSweep`, and the
    others declared ``sweep_key`` (the schedule's)."""
    per = PerSweep.declarations()
    return per + tuple(s for s in Settings.declarations() if s.sweep_key and s not in per)


def sweep_keys() -> tuple[str, ...]:
    """Every key a ``[sweeps.NAME]`` table takes."""
    return tuple(s.name for s in setting_keys()) + tuple(FIELDS)


def builtin_keys() -> tuple[str, ...]:
    """The keys a built-in sweep's table takes: the rest declare a sweep of its own."""
    own = tuple(n for n, f in FIELDS.items() if not f.metadata["declares"])
    return tuple(s.name for s in setting_keys()) + own


def parse_sweeps_table(table: Any, source: str) -> dict[str, SweepSettings]:
    """The ``[sweeps]`` table: sweep name -> its ``[sweeps.NAME]`` table, parsed.

    Raises:
        ConfigError: one line naming ``source``, the table and the key.
    """
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [sweeps] must be a table of [sweeps.NAME] tables")
    out = {}
    for name, body in table.items():
        where = f"{source}: [sweeps.{name if SWEEP_NAME.fullmatch(name) else shown(name)}]"
        if not SWEEP_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: a sweep name is lower case letters, digits and _ (a metric label), "
                "starting with a letter"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{where} must be a table")
        body = {k.replace("-", "_"): v for k, v in body.items()}
        known = sweep_keys()
        unknown = set(body) - set(known)
        if unknown:
            guesses = "".join(filter(None, (did_you_mean(k, known) for k in sorted(unknown))))
            raise ConfigError(
                f"{where} has unknown key(s) {', '.join(sorted(unknown))}"
                + (guesses or f"; known: {', '.join(sorted(known))}")
            )
        try:
            out[name] = _parse_sweep(body)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where} {exc}") from None
    return out


def _parse_sweep(body: Mapping[str, Any]) -> SweepSettings:
    settings = {s.name: s for s in setting_keys()}
    own = {k: keyed(k, settings[k].sweep_parse, v) for k, v in body.items() if k in settings}
    rest = {k: keyed(k, FIELDS[k].metadata["parse"], v) for k, v in body.items() if k in FIELDS}
    return SweepSettings(own=own, **rest)
