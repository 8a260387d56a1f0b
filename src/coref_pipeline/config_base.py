"""The base of every typed settings object: read from a mapping, checked, written back.

``Config.from_dict`` rejects unknown keys (naming the known ones) and values of
the wrong type (naming the key, the value and the expected type), so a typo or a
wrong value in a parameter file is one clear line, not a failure deep in a run.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from coref_pipeline.errors import UserError

ConfigT = TypeVar("ConfigT", bound="Config")


class ConfigError(UserError, ValueError):
    """A configuration with unknown keys or values of the wrong type or range."""


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join("null" if arg is type(None) else _type_name(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is dict or hint is dict:
        return "a mapping of keys to values"
    if typing.get_origin(hint) is tuple:
        element = typing.get_args(hint)[0]
        plural = {int: "integers", float: "numbers", str: "strings"}
        elements = (
            typing.get_args(element) if typing.get_origin(element) in (typing.Union, types.UnionType) else [element]
        )
        return "a list of " + " or ".join(plural.get(item, str(item)) for item in elements)
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(hint, str(hint))


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` as the field type ``hint`` wants it; raises ``TypeError`` when it is not of that type."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is type(None):
                if value is None:
                    return None
                continue
            try:
                return _coerce(value, arg)
            except TypeError:
                continue
        raise TypeError
    if typing.get_origin(hint) is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise TypeError
        return dict(value)
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list | tuple):
            raise TypeError
        return tuple(_coerce(item, typing.get_args(hint)[0]) for item in value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise TypeError
    if hint is str:
        if isinstance(value, str):
            return value
        raise TypeError
    return value


class Config:
    """Reading and writing a configuration dataclass: the one place for ``from_dict`` and ``to_dict``."""

    what: ClassVar[str] = "configuration"

    @classmethod
    def from_dict(cls: type[ConfigT], values: Mapping[str, Any]) -> ConfigT:
        """Build from a mapping; an unknown key or a value of the wrong type is a :class:`ConfigError`."""
        hints = typing.get_type_hints(cls)
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ConfigError(f"unknown {cls.what} key(s) {unknown}; known keys: {sorted(names)}")
        kwargs = {}
        for key, value in values.items():
            try:
                kwargs[key] = _coerce(value, hints[key])
            except TypeError:
                raise ConfigError(f"{cls.what} key {key!r}: {value!r} is not {_type_name(hints[key])}") from None
        return cls(**kwargs)

    def require(self, ok: bool, key: str, requirement: str) -> None:
        """A :class:`ConfigError` naming ``key``, its value and ``requirement`` unless ``ok``."""
        if not ok:
            raise ConfigError(f"{self.what} key {key!r} must be {requirement}, got {getattr(self, key)!r}")

    def require_range(self, key: str, low: float, high: float, low_open: bool = False, high_open: bool = False) -> None:
        """``key``'s value must lie between ``low`` and ``high`` (each end included unless open)."""
        value = getattr(self, key)
        ok = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
        self.require(ok, key, f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML values (tuples as lists)."""
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(self).items()  # type: ignore[call-overload]
        }
