"""Human-readable quantities for messages and tables, and durations as people write them."""

from __future__ import annotations

import math
import re
from numbers import Real

from ..errors import ConfigError


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``: binary units, whole bytes below one KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"


#: Seconds per duration unit, by every spelling :func:`parse_duration` accepts.
DURATION_UNITS = {**dict.fromkeys(("", "s", "sec", "secs", "second", "seconds"), 1.0),
                  **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
                  **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0)}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", re.IGNORECASE)


def parse_duration(value: str | float, what: str = "duration") -> float:
    """``300s``, ``5m``, ``1h``, ``1h30m``, ``90`` (plain seconds) or a positive number -> seconds.

    Anything else (an unknown unit, a negative, zero or non-finite value) is refused with a
    :class:`ConfigError` naming ``what`` and how to write it.
    """
    hint = "write e.g. 300s, 5m, 1h30m or plain seconds (300)"
    if isinstance(value, Real) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text, seconds, at = value.strip(), 0.0, 0
        while at < len(text):
            match = _DURATION_PART.match(text, at)
            unit = match.group(2).lower() if match else None
            if match is None or unit not in DURATION_UNITS or (unit == "" and (at, match.end()) != (0, len(text))):
                raise ConfigError(f"The {what} {value!r} is not a duration; {hint}.")
            seconds += float(match.group(1)) * DURATION_UNITS[unit]
            at = match.end()
            while at < len(text) and text[at].isspace():
                at += 1
        if not text:
            raise ConfigError(f"The {what} is empty; {hint}.")
    else:
        raise ConfigError(f"The {what} {value!r} is not a duration; {hint}.")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"The {what} {value!r} is not a positive duration; {hint}.")
    return seconds


def human_seconds(seconds: float) -> str:
    """``0.42`` -> ``0.42 s``, ``75`` -> ``1 min 15 s``, ``3600`` -> ``1 h``: for messages and tables."""
    # Each branch is chosen by the value as it will be printed: 9.99999 (a sum of float clock readings that
    # should be 10) prints as ``10 s``, not ``10.0 s``, and 59.7 as ``1 min``, not ``60 s``.
    if seconds < 0.995:
        return f"{seconds:.2g} s"
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")
