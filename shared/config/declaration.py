"""How a ``Settings`` field is declared and read from the environment: its variable,
older names, kind, bounds and meaning, in one ``setting(...)`` call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from shared.errors import ConfigurationError

Kind = Literal["int", "bool", "str", "raw"]


@dataclass(frozen=True, slots=True)
class Setting:
    """How one ``Settings`` field is read from the environment.

    ``names``: the variable, then older names read when it is unset. ``kind``: ``int``
    (a whole number, at least ``minimum``), ``bool``, ``str`` (stripped; blank is
    unset) or ``raw`` (any non-empty value, even blank space, as the Google libraries
    read an emulator's host: it must not be stripped away here). ``shown``: the
    default as the README states it, when that is not the value itself.
    """

    names: tuple[str, ...]
    meaning: str
    kind: Kind
    minimum: int | None = None
    shown: str | None = None


T = TypeVar("T")


def setting(
    name: str,
    default: T,
    meaning: str,
    *,
    minimum: int = 1,
    raw: bool = False,
    older: tuple[str, ...] = (),
    shown: str | None = None,
    secret: bool = False,
) -> T:
    """A ``Settings`` field read from the variable ``name``: its one declaration."""
    kind: Kind = (
        "bool"
        if isinstance(default, bool)
        else "int"
        if isinstance(default, int)
        else "raw"
        if raw
        else "str"
    )
    declared = Setting((name, *older), meaning, kind, minimum if kind == "int" else None, shown)
    return field(default=default, repr=not secret, metadata={"setting": declared})


def read(env: Mapping[str, str], setting: Setting, default: Any) -> Any:
    """The value ``setting`` has in ``env``, or ``default`` when none of its names is set."""
    for name in setting.names:
        raw = env.get(name, "")
        text = raw if setting.kind == "raw" else raw.strip()
        if not text:
            continue
        if setting.kind == "int":
            return _int(name, text, setting.minimum or 0)
        if setting.kind == "bool":
            return _bool(name, text.lower())
        return text
    return default


def _int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, not {text!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, not {value}")
    return value


def _bool(name: str, text: str) -> bool:
    if text in ("0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ConfigurationError(f"{name} must be true or false, not {text!r}")
