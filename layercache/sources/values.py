"""What a cell of a data table holds: missing or not, and the number it stands for.

Column detection, header detection and label encoding all read cells through these few rules, so
``"3"``, ``3`` and ``3.0`` mean the same label everywhere, and a blank string is missing everywhere.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

INT_RE = re.compile(r"[+-]?\d+")
"""A cell that spells an integer (``"3"``, ``"-1"``)."""
FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
"""A cell that spells a number (``"0.5"``, ``"1e-3"``)."""


def is_nan(value: Any) -> bool:
    """Whether ``value`` is a float NaN (what pandas and parquet give for an empty numeric cell)."""
    return isinstance(value, float) and math.isnan(value)


def is_missing(value: Any) -> bool:
    """Whether a cell holds nothing: ``None``, NaN, or a blank string."""
    return value is None or is_nan(value) or (isinstance(value, str) and not value.strip())


def as_number(value: Any) -> int | float | None:
    """The number a label value stands for (``"3"`` -> 3, ``"0.5"`` -> 0.5), or ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, str):
        text = value.strip()
        if INT_RE.fullmatch(text):
            return int(text)
        if FLOAT_RE.fullmatch(text):
            return float(text)
    return None
