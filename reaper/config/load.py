"""Loading: the TOML file and the explicit values become one :class:`Config`, built once.

``load_config`` is the one place where settings and sweeps are built: the settings are
parsed and checked, then every sweep is resolved from them; a reload (SIGHUP) calls it again
and the caller keeps its running config when it raises.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reaper.config import nesting
from reaper.config.files import read_regular_file
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep, configured_sweeps, select
from reaper.errors import ConfigError


@dataclass(frozen=True)
class Config:
    """What reaper was told, resolved: the settings and every sweep they configure
    (disabled ones included), in dependency order; and what it was read from, to read it
    again (:meth:`reload`): the TOML file, and the flags' and variables' raw values by
    setting name (each one's origin is in ``settings.origins``)."""

    settings: Settings
    sweeps: tuple[Sweep, ...]
    path: Path | None = None
    explicit: Mapping[str, Any] = field(default_factory=dict)

    def reload(self) -> Config:
        """This configuration read again (SIGHUP): the file re-read, under the same flags
        and variables, each still named by where it came from.

        Raises:
            ConfigError: one line naming the file, flag or variable and what is wrong.
        """
        labels = {name: self.settings.origins[name] for name in self.explicit}
        return read_config(self.path, self.explicit, labels=labels)

    def enabled(self, names: Sequence[str] = ()) -> list[Sweep]:
        """The sweeps to run: those called ``names`` (a disabled one included when named),
        else every enabled one, in dependency order.

        Raises:
            ConfigError: an unknown name.
        """
        chosen = select(self.sweeps, names)
        return chosen if names else [s for s in chosen if s.enabled]


def load_config(
    explicit: Mapping[str, Any],
    file_values: Mapping[str, Any] | None = None,
    *,
    source: str = "config file",
    labels: Mapping[str, str] | None = None,
) -> Config:
    """Build the settings (see :func:`reaper.config.settings.build_settings` for the
    arguments), then resolve every sweep from them.

    Raises:
        ConfigError: one line naming the setting or ``[sweeps.NAME]`` and the fix.
    """
    settings = build_settings(explicit, file_values, source=source, labels=labels)
    try:
        sweeps = configured_sweeps(settings)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return Config(settings, tuple(sweeps))


def read_config(
    config_path: Path | None,
    explicit: Mapping[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
) -> Config:
    """The config from the TOML file at ``config_path`` (None: none) under the flags and
    REAPER_* values (``explicit``, by setting name, named in errors by ``labels``; default
    their flags), which win. A reload (SIGHUP) reads it again (:meth:`Config.reload`); the
    caller keeps its running config when that raises.

    Raises:
        ConfigError: one line naming the file, flag or variable and what is wrong.
    """
    file_values = load_toml(config_path) if config_path else {}
    config = load_config(explicit, file_values, source=str(config_path or "config"), labels=labels)
    return dataclasses.replace(config, path=config_path, explicit=dict(explicit))


# The reload of a daemon (SIGHUP) reads the file as its start did.
reload_config = read_config


# A reaper config is a few kilobytes; past this a --config is the wrong file (a log, a dump).
MAX_CONFIG_BYTES = 1024 * 1024


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config file: a regular file of at most :data:`MAX_CONFIG_BYTES`, so that
    a directory, a device (``/dev/zero``), a FIFO (which would block ``open``) or a huge file
    is refused at once instead of read; its values nest at most
    :data:`reaper.config.nesting.MAX_DEPTH` deep, so that nothing after it recurses far.

    Raises:
        ConfigError: the file is missing, unreadable, not a regular file, too large, nested
            too deep, or not valid UTF-8 TOML.
    """
    data = read_regular_file(
        path,
        name=f"config file {path}",
        expect="give --config a TOML file",
        limit_bytes=MAX_CONFIG_BYTES,
    )
    try:
        text = data.decode("utf-8")
        nesting.check_text(text)
        document = tomllib.loads(text)
        nesting.check_value(document)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text; save it as UTF-8") from None
    except nesting.TooDeep as exc:
        raise ConfigError(f"config file {path}: {exc}; flatten it") from None
    return document
