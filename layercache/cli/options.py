"""The options several commands share, each declared once: its flags, its help and its default.

A default is never written here: each is read from the library that owns it (a keyword default of
the call the command makes, or the constant beside it), so ``--help`` shows what the library does
when the option is left out. A list of values comes from :mod:`.choices`, read from its registry.
"""

from __future__ import annotations

import typer

from ..core.devices import DEFAULT_DEVICE, DEVICE_SPELLINGS

THREADS_HELP = ("Torch threads: a number up to the cores this process may use, or auto: the cores other processes "
                "leave idle (a thread that loses its core to another process stalls all the others).")
ALLOW_PICKLE_HELP = ("Load a backbone that has only pickle weights (pytorch_model.bin), which can run code when "
                     "loaded: only for a source you trust.")


def device_option():
    """``--device``: where the backbone or the head computes (every command that runs torch on a device)."""
    return typer.Option(DEFAULT_DEVICE, "--device", help=f"{DEVICE_SPELLINGS}.")


def threads_option():
    """``--threads`` (default ``auto``), applied by :func:`~layercache.cli.threads.apply_threads`."""
    return typer.Option("auto", "--threads", help=THREADS_HELP)


def quiet_option():
    """``--quiet`` / ``-q``: no progress bar."""
    return typer.Option(False, "--quiet", "-q", help="No progress bar.")


def allow_pickle_option():
    """``--allow-pickle``, on the commands that load a backbone: extract, predict, verify, train-head --live."""
    return typer.Option(False, "--allow-pickle", help=ALLOW_PICKLE_HELP)
