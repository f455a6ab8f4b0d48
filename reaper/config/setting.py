"""One setting, declared once, and the frozen values that hold settings.

A :class:`Setting` is a class attribute of :class:`reaper.config.declarations.Settings`, or of
:class:`reaper.config.declarations.PerSweep` for a setting that a ``[sweeps.NAME]`` table may
set too. Everything else follows from that one declaration: the flag ``--name``, the variable
``REAPER_NAME``, the TOML key ``name``, the ``[sweeps.NAME]`` key, the attribute of every
resolved sweep, the help text and the configuration reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Generic, TypeVar, overload

from reaper.config.values import EXPECTED, format_duration, scalar

T = TypeVar("T")

# Every setting's environment variable is this, an underscore and its name in upper case.
ENV_PREFIX = "REAPER"


def envvar(name: str) -> str:
    """The environment variable of option ``name`` (``REAPER_BATCH_SIZE``)."""
    return f"{ENV_PREFIX}_{name.upper()}"


class Setting(Generic[T]):
    """One setting: its value type (a parser), default and help; its name is the attribute's.

    Read on a class it is the declaration; read on a value (:class:`Declared`) it is that
    value's setting, of type ``T``.

    Args:
        default: the value when no source gives one (a named constant with its unit).
        parse: the value type: raw text or TOML value -> ``T``, raising ValueError with the
            fix (:func:`reaper.config.values.scalar` guards it); one with an ``expected``
            text (:class:`reaper.config.values.BoundedDuration`) names its own fix.
        help: one paragraph for ``--help`` and the reference.
        metavar: the kind of value (``ROWS``, ``DURATION``); None: a boolean. It names the
            fix in errors (:data:`reaper.config.values.EXPECTED`).
        shown_default: how help shows the default when its value would mislead (``0
            (off)`` where a user writes 0 to get None).
        sweep_key: a ``[sweeps.NAME]`` table takes it too, and the sweep resolves it with
            others (the schedule settings become a sweep's cron and window). A setting of
            :class:`~reaper.config.declarations.PerSweep` is a sweep key without this.
        sweep_parse: the value type of its ``[sweeps.NAME]`` key, when it differs.
        secret: never shown (the DSN may hold a password).
    """

    name: str

    def __init__(
        self,
        default: T,
        parse: Callable[[Any], T],
        help: str,
        metavar: str | None = None,
        *,
        shown_default: str | None = None,
        sweep_key: bool = False,
        sweep_parse: Callable[[Any], Any] | None = None,
        secret: bool = False,
    ) -> None:
        self.default = default
        self.value_type = parse
        self.parse: Callable[[Any], T] = scalar(parse)
        self.sweep_parse: Callable[[Any], Any] = scalar(sweep_parse or parse)
        self.help = help
        self.metavar = metavar
        self.sweep_key = sweep_key
        self.secret = secret
        self._shown_default = shown_default

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> Setting[T]: ...

    @overload
    def __get__(self, obj: Declared, owner: type[Any] | None = None) -> T: ...

    def __get__(self, obj: Declared | None, owner: type[Any] | None = None) -> T | Setting[T]:
        return self if obj is None else obj.setting_value(self)

    def __repr__(self) -> str:
        return f"Setting({self.name!r})"

    @property
    def flag(self) -> str:
        """``--batch-size``."""
        return "--" + self.name.replace("_", "-")

    @property
    def envvar(self) -> str:
        """``REAPER_BATCH_SIZE``."""
        return envvar(self.name)

    @property
    def expected(self) -> str:
        """What a value looks like, for the fix of an error message: as its value type
        says (a bounded duration names its maximum), else as its kind (metavar) does."""
        own: str | None = getattr(self.value_type, "expected", None)
        return own or EXPECTED.get(self.metavar) or f"a valid {self.metavar}"

    @property
    def shown_default(self) -> str:
        """The default as a user writes it: ``30d``, ``none``, ``off``, ``0.95``."""
        value: Any = self.default
        if self._shown_default is not None:
            return self._shown_default
        if isinstance(value, timedelta):
            return format_duration(value)
        if value is None:
            return "none"
        if isinstance(value, bool):
            return "on" if value else "off"
        return str(value)

    def shown(self, value: Any) -> str:
        """``value`` of this setting as a message or a repr may show it."""
        if self.secret and value is not None:
            return "'(not shown)'"
        return repr(value)


class Declared:
    """A value whose attributes include settings (:class:`Setting` class attributes); a
    subclass says where their values are (:meth:`setting_value`)."""

    __slots__ = ()

    def setting_value(self, setting: Setting[T]) -> T:
        """The value of ``setting`` in this object."""
        raise NotImplementedError

    @classmethod
    def declarations(cls) -> tuple[Setting[Any], ...]:
        """The settings of this class, base classes' first, each in declaration order."""
        found: dict[str, Setting[Any]] = {}
        for klass in reversed(cls.__mro__):
            for value in vars(klass).values():
                if isinstance(value, Setting):
                    found[value.name] = value
        return tuple(found.values())


class Values(Declared):
    """A frozen value of every setting its class declares: each given one, else its default.

    ``origins`` names where each given value came from (``--dsn``, ``REAPER_DSN``,
    ``/etc/reaper.toml key dsn``), for errors found after parsing (:meth:`described`); it
    takes no part in equality.
    """

    __slots__ = ("_values", "origins")
    _values: Mapping[str, Any]
    origins: Mapping[str, str]

    def __init__(self, *, origins: Mapping[str, str] | None = None, **values: Any) -> None:
        known = {s.name: s for s in self.declarations()}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no setting {unknown[0]!r}")
        given = {name: values.get(name, s.default) for name, s in known.items()}
        object.__setattr__(self, "_values", given)
        object.__setattr__(self, "origins", dict(origins or {}))

    def setting_value(self, setting: Setting[T]) -> T:
        # A setting declared after this value was built (a test's) reads as its default.
        value: T = self._values.get(setting.name, setting.default)
        return value

    def described(self, name: str) -> str:
        """How an error names setting ``name`` and its value: ``node_retention (30d)``, with
        ``, from REAPER_NODE_RETENTION`` (its origin) when it was given."""
        value = self._values.get(name)
        if getattr(type(self), name).secret:
            shown = "not shown"
        else:
            shown = format_duration(value) if isinstance(value, timedelta) else str(value)
        origin = self.origins.get(name)
        return f"{name} ({shown}, from {origin})" if origin else f"{name} ({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Values)
        return self._compared() == other._compared()

    # Equal values need not hash alike once a mapping is among them: like a frozen dataclass
    # with a dict field, a Values is not hashable.
    __hash__ = None  # type: ignore[assignment]

    def _compared(self) -> tuple[Any, ...]:
        return (dict(self._values),)

    def __repr__(self) -> str:
        shown = ", ".join(f"{s.name}={s.shown(self.setting_value(s))}" for s in self.declarations())
        return f"{type(self).__name__}({shown})"
