"""Message helpers and scalar checks shared by every section of the study spec.

Each problem becomes one line ``<file>: <dotted.field>: <message>``; the helpers here build the
messages (did-you-mean hints, allowed values, values shown by kind), the scalar checks that give
them, the duration parser, the frozen base model, and the collector that turns pydantic errors
into lines.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from hpsearch.spec._devices import DEVICE_FRACTIONS, device_count

_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_BYTES_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?$", re.IGNORECASE)
_BYTES_UNITS = {
    "b": 1,
    **{f"{p}b": 1000 ** (i + 1) for i, p in enumerate("kmgt")},
    **{f"{p}ib": 1024 ** (i + 1) for i, p in enumerate("kmgt")},
}


def _did_you_mean(word: str, allowed: Sequence[str]) -> str:
    matches = difflib.get_close_matches(word, list(allowed), n=1, cutoff=0.6)
    return f"; did you mean '{matches[0]}'?" if matches else ""


def _allowed(allowed: Sequence[str]) -> str:
    return f"(allowed: {', '.join(allowed)})"


def _show(value: Any) -> str:
    """Show a value in a message: scalars as ``repr``, containers by kind."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return repr(value)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else _show(value)


def _fail(message: str) -> PydanticCustomError:
    # The message travels in the context so that braces in user values are never templated.
    return PydanticCustomError("hpsearch", "{message}", {"message": message})


# ------------------------------------------------------------------------ scalar validators


def _expect_int(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"expected an integer, got {_show(value)}")
    return value


def _expect_devices(value: Any) -> Any:
    """A device count: a whole number >= 1, or a fraction of one device (1/2, 1/4, 1/8)."""
    found = device_count(value)
    if found is not None:
        return found
    if isinstance(value, int) and not isinstance(value, bool):
        raise _fail(f"must be >= 1 or a fraction of one device (1/2, 1/4, 1/8), got {value}")
    raise _fail(
        f"expected a whole number of devices (>= 1) or a fraction of one device "
        f"({', '.join(DEVICE_FRACTIONS)}, or {', '.join(map(str, DEVICE_FRACTIONS.values()))}), "
        f"got {_show(value)}"
    )


def _expect_float(value: Any) -> Any:
    # PyYAML reads ``1e-4`` (no dot) as a string, so numeric strings are accepted here.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(f"expected a number, got {_show(value)}")
    return float(value)


def _expect_bool(value: Any) -> Any:
    if not isinstance(value, bool):
        raise _fail(f"expected true or false, got {_show(value)}")
    return value


def _expect_str(value: Any) -> Any:
    if not isinstance(value, str):
        raise _fail(f"expected a string, got {_show(value)}")
    return value


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check_optional(value: Any) -> Any:
        return None if value is None else check(value)

    return check_optional


def _auto_or_positive_int(value: Any) -> Any:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise _fail(f"expected 'auto' or an integer >= 1, got {_show(value)}")


def parse_duration(value: Any) -> float | None:
    """Normalise a duration to seconds.

    Args:
        value: None, a number of seconds, or a string ``<number>[s|m|h|d]`` such as ``"90s"``,
            ``"30m"``, ``"2h"``, ``"1.5d"`` or ``"45"`` (seconds).

    Returns:
        The duration in seconds as a float, or None when ``value`` is None.

    Raises:
        ValueError: The value is not one of the forms above, or not > 0.

    Example:
        >>> parse_duration("30m"), parse_duration(90), parse_duration(None)
        (1800.0, 90.0, None)
    """
    if value is None:
        return None
    if isinstance(value, str):
        match = _DURATION_RE.match(value.strip())
        if match is None:
            raise ValueError(
                f"expected seconds or a duration such as '90s', '30m', '2h' or '1d', got {value!r}"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(
            f"expected seconds or a duration such as '90s', '30m', '2h' or '1d', got {_show(value)}"
        )
    if not seconds > 0:
        raise ValueError(f"must be > 0 seconds, got {value!r}")
    return seconds


def parse_bytes(value: Any) -> int | None:
    """Parse a memory size: a number of bytes, or a string such as ``"2GiB"`` or ``"512MB"``.

    Units (any case): B, kB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (of 1024).

    Raises:
        ValueError: The value is not one of these forms, or not >= 1 byte.

    Example:
        >>> parse_bytes("2GiB"), parse_bytes("1.5kB"), parse_bytes(4096), parse_bytes(None)
        (2147483648, 1500, 4096, None)
    """
    if value is None:
        return None
    expected = "expected bytes or a size such as '512MiB', '2GiB' or '1.5GB'"
    if isinstance(value, str):
        match = _BYTES_RE.match(value.strip())
        if match is None:
            raise ValueError(f"{expected}, got {value!r}")
        size = float(match.group(1)) * _BYTES_UNITS[(match.group(2) or "b").lower()]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        size = float(value)
    else:
        raise ValueError(f"{expected}, got {_show(value)}")
    if not size >= 1:
        raise ValueError(f"must be at least 1 byte, got {value!r}")
    return int(size)


def _bytes(value: Any) -> Any:
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _duration(value: Any) -> Any:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _choice(kind: str, allowed: Sequence[str]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, Enum):
            value = value.value
        if not isinstance(value, str):
            raise _fail(f"expected one of {', '.join(allowed)}, got {_show(value)}")
        if value.lower() not in allowed:
            hint = _did_you_mean(value, allowed)
            raise _fail(f"unknown {kind} {value!r}{hint} {_allowed(allowed)}")
        return value.lower()

    return check


_Int = Annotated[int, BeforeValidator(_expect_int)]
_Devices = Annotated[int | float, BeforeValidator(_expect_devices)]
_Float = Annotated[float, BeforeValidator(_expect_float)]
_Bool = Annotated[bool, BeforeValidator(_expect_bool)]
_Str = Annotated[str, BeforeValidator(_expect_str)]
_OptStr = Annotated[str | None, BeforeValidator(_optional(_expect_str))]
_Seconds = Annotated[float | None, BeforeValidator(_duration)]
_Bytes = Annotated[int | None, BeforeValidator(_bytes)]
_AutoOrInt = Annotated[Literal["auto"] | int, BeforeValidator(_auto_or_positive_int)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Problems:
    """Collects ``(dotted field, message)`` pairs and renders them as lines for one file."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: list[str] = []

    def add(self, field: str, message: str) -> None:
        where = f"{self.label}: {field}" if field else self.label
        self.lines.append(f"{where}: {message}")

    def unknown_keys(self, field: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
        for key in given:
            if key not in allowed:
                where = f"{field}.{key}" if field else str(key)
                hint = _did_you_mean(str(key), allowed)
                self.add(where, f"unknown key{hint} {_allowed(allowed)}")

    def validate(self, model: type[_Spec], data: Any, field: str) -> Any:
        """Validate one section; record its problems and return the model, or None."""
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                self.add(_join(field, error["loc"]), _message(error, model))
            return None


def _join(field: str, loc: Sequence[int | str]) -> str:
    return ".".join([field, *(str(part) for part in loc)] if field else [str(p) for p in loc])


def _fields(model: type[BaseModel]) -> list[str]:
    """The keys a section takes, as written in the file (``from``, not ``from_``)."""
    return [f.alias or name for name, f in model.model_fields.items() if name != "source"]


def _model_at(model: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel]:
    """The section model at ``loc`` inside ``model`` (``model`` where loc leaves sections)."""
    for part in loc:
        field = model.model_fields.get(str(part))
        inner = field.annotation if field is not None else None
        # An optional section (``SlurmSpec | None``) is the section's model.
        models = [
            t
            for t in (typing.get_args(inner) or (inner,))
            if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if not models:
            break
        model = models[0]
    return model


def _message(error: Any, model: type[_Spec]) -> str:
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "hpsearch":
        return str(ctx["message"])
    if kind == "extra_forbidden":
        allowed = _fields(_model_at(model, error["loc"][:-1]))
        return f"unknown key{_did_you_mean(str(error['loc'][-1]), allowed)} {_allowed(allowed)}"
    if kind == "missing":
        return "required"
    if kind in ("greater_than_equal", "greater_than"):
        sign, bound = (">=", ctx["ge"]) if kind == "greater_than_equal" else (">", ctx["gt"])
        return f"must be {sign} {_number(bound)}, got {_number(value)}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping, got {_show(value)}"
    return f"{error['msg']}, got {_show(value)}"
