"""Durations as people write them: ``90``, ``"30s"``, ``"15m"``, ``"1h"``, ``"2d"``, ``"1h30m"``.

Read by the CLI (``--for 1h``, ``--every 30s``) and by policy files (``expires_after =
"1h"``); a Python caller passes seconds or a ``timedelta``.
"""

from __future__ import annotations

import math
import re

__all__ = ["DurationError", "parse_duration", "span", "time_left"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


class DurationError(ValueError):
    """A duration that cannot be read; the message says what is expected."""


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number of seconds, or parts like ``1h30m`` (s, m, h, d).

    Example::

        parse_duration("1h30m")   # 5400.0
        parse_duration("45")      # 45.0
    """
    raw = text.strip().lower()
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
        if raw and _PART.sub("", raw) == "":
            seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(raw))
    if not math.isfinite(seconds) or seconds <= 0:
        raise DurationError(
            f"cannot read the duration {text!r}: expected a number of seconds or parts like 30s, 15m, "
            "1h, 2d (1h30m), more than zero"
        )
    return seconds


def span(seconds: float) -> str:
    """A length of time as a reviewer reads it: ``42 s``, ``59 min``, ``2 h 5 min``, ``3 d 4 h``
    (whole units, rounded down)."""
    left = int(seconds)
    if left < 60:
        return f"{left} s"
    if left < 3600:
        return f"{left // 60} min"
    if left < 86400:
        hours, minutes = divmod(left // 60, 60)
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(left // 3600, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def time_left(seconds: float) -> str:
    """``expires in 43 min`` (``42 s``, ``2 h 5 min``, ``3 d 4 h``), or ``expired`` once past.

    Whole units, rounded down: a reviewer is never promised more time than is left.
    """
    return "expired" if seconds <= 0 else f"expires in {span(seconds)}"
