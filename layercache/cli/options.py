"""The options several commands share, each declared once: its flags, its help and its default.

A default is never written here: each is read from the library that owns it (the constant or options spec
that the keyword defaults of the call the command makes read too), so ``--help`` shows what the library does
when the option is left out, without importing the library's heavy modules. A list of values comes from
:mod:`.choices`, read from its registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from ..extraction.specs import BatchSpec
from .parsing import parse_threads
from .spec_options import field_option

THREADS_HELP = ("Torch threads: a number up to the cores this process may use, or auto: OMP_NUM_THREADS when it is "
                "set, else the cores other processes leave idle (a thread that loses its core to another process "
                "stalls all the others).")
ALLOW_PICKLE_HELP = ("Load a backbone that has only pickle weights (pytorch_model.bin), which can run code when "
                     "loaded: only for a source you trust.")


def cache_argument():
    """The ``CACHE`` argument of every command that reads a cache (default: the most recent one)."""
    return typer.Argument(None, help="Cache folder.", show_default="the most recent one")


def check_before_loading(cache: Path | None, threads: str, settings: Sequence[tuple[type, Mapping[str, Any]]] = (),
                         ) -> None:
    """Refuse bad input before a command imports its model stack, in the order the library call refuses it:
    ``--threads`` out of range, a setting its spec's rules refuse, then a cache folder that does not exist or holds
    no valid manifest (None: no recent cache). Torch and scikit-learn take seconds to load and the library call
    comes after them: ``train-head /nonexistent`` took 13 s to say what this says at once, in the same sentence."""
    from ..core.option_specs import check_options
    from ..core.threads import resolve_threads
    from ..store.manifest import read_manifest
    from ..store.paths import resolve_cache_path

    number = parse_threads(threads)
    if number is not None:  # (auto samples the machine's load: left to the call that applies it)
        resolve_threads(number)
    for spec, values in settings:
        check_options(spec, values)
    read_manifest(resolve_cache_path(cache))


def device_option():
    """``--device``: where the backbone computes (verify, predict); declared on
    :class:`~layercache.extraction.specs.BatchSpec` (``train-head`` and ``sweep`` take the head's, the same flag)."""
    return field_option(BatchSpec, "device")


def device_map_option():
    """``--device-map``: split a backbone larger than one device (extract, plan, verify, predict)."""
    return field_option(BatchSpec, "device_map")


def max_memory_option():
    """``--max-memory DEVICE=SIZE``, repeatable: the most ``--device-map`` puts on each device."""
    return field_option(BatchSpec, "max_memory")


def threads_option():
    """``--threads`` (default ``auto``), applied by :func:`~layercache.cli.threads.apply_threads`."""
    return typer.Option("auto", "--threads", help=THREADS_HELP)


def quiet_option():
    """``--quiet`` / ``-q``: no progress bar, and no progress lines in a pipe or log."""
    return typer.Option(False, "--quiet", "-q", help="No progress bar (nor progress lines in a pipe or log).")


def allow_pickle_option():
    """``--allow-pickle``, on the commands that load a backbone: extract, predict, verify, train-head --live."""
    return typer.Option(False, "--allow-pickle", help=ALLOW_PICKLE_HELP)


# --- training: train-head and sweep (the head's own settings are HeadOptions' fields, the sweep's SweepOptions') ------

def train_split_option(default: str):
    """``--train-split``; ``default``: the training split of the call the command makes."""
    return typer.Option(default, "--train-split", help="Split to train on.")


def val_split_option(role: str = ""):
    """``--val-split``; ``role``: what else it does (`` (ranks the candidates)`` in a sweep)."""
    return typer.Option(None, "--val-split", help=f"Validation split{role}.",
                        show_default="the cache's validation split, else one seeded 10% slice of train")


def test_split_option():
    """``--test-split``: reported, never chosen on."""
    return typer.Option(None, "--test-split", help="Split to report on (never used to choose).",
                        show_default="test when present")


def overwrite_option(folder: str):
    """``--overwrite``: write into a non-empty ``folder`` (``run folder``, ``sweep folder``)."""
    return typer.Option(False, "--overwrite", help=f"Write into a non-empty {folder}.")


# --- memory: train-head, sweep and probe-report ------------------------------------------------------------------

def memory_budget_option():
    """``--memory-budget SIZE``, read by :func:`parse_memory_budget`; the library's default (None) when left out."""
    from ..core.memory import DEFAULT_SHARE

    return typer.Option(
        None, "--memory-budget", help="Memory the work may hold on top of the interpreter's own, e.g. 1GB, 512MiB: "
        "features and feeds are read in pieces that fit it (same results).",
        show_default=f"{DEFAULT_SHARE:.0%} of the memory available")


def parse_memory_budget(text: str | None) -> int | None:
    """``--memory-budget``: a size (:func:`~layercache.cli.parsing.parse_size`) checked by
    :func:`~layercache.core.memory.memory_budget`, or None for the library's default."""
    from ..core.memory import memory_budget
    from .parsing import parse_size

    return None if text is None else memory_budget(parse_size(text))
