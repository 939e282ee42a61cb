"""``--threads``: the one option every command that computes takes, and how it is applied."""

from __future__ import annotations

import typer

from . import base
from .parsing import parse_threads

THREADS_HELP = ("Torch threads: a number up to the cores this process may use, or auto: the cores other processes "
                "leave idle (a thread that loses its core to another process stalls all the others).")


def threads_option():
    """The ``--threads`` typer option (default ``auto``)."""
    return typer.Option("auto", "--threads", help=THREADS_HELP)


def apply_threads(value: str) -> None:
    """Set torch's threads from ``--threads``; say so when ``auto`` leaves cores to other processes."""
    from ..core.threads import use_threads

    choice = use_threads(parse_threads(value))
    if not choice.asked and choice.threads < choice.usable:
        base.err_console.print(f"Computing with {choice.describe()}.", style="dim", soft_wrap=True)
