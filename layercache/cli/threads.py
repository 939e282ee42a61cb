"""How ``--threads`` (declared in :mod:`.options`) is applied."""

from __future__ import annotations

from . import base
from .parsing import parse_threads


def apply_threads(value: str) -> None:
    """Set torch's threads from ``--threads``; say so when ``auto`` leaves cores to other processes."""
    from ..core.threads import use_threads

    choice = use_threads(parse_threads(value))
    if not choice.asked and choice.threads < choice.usable:
        base.err_console.print(f"Computing with {choice.describe()}.", style="dim", soft_wrap=True)
