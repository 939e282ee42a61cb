"""Human-readable quantities for messages and tables."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``: binary units, whole bytes below one KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"
