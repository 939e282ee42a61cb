"""How a message names an option: ``--overwrite`` to whoever typed a command, ``overwrite=True`` to a Python caller.

The library's refusals name the fix, and the fix is often an option. The same sentence reaches two
audiences: the command line (``layercache train-head ... --out runs/scalar``) and a notebook
(``train_head(cache, "scalar", out="runs/scalar")``). Telling a Python caller to "pass --overwrite"
names a flag their call does not have. So a message names an option through :func:`option`, which
asks who is listening:

    raise ConfigError(f"{folder} is not empty; choose another {option('out')} or pass {option('overwrite', True)}.")

- to Python (the default): ``choose another out=... or pass overwrite=True``;
- inside :func:`speaking_to_command_line` (the CLI enters it around every command): ``choose another
  --out or pass --overwrite``.

The flag is the keyword with dashes (``storage_dtype`` -> ``--storage-dtype``), or ``--no-<flag>`` for a
boolean keyword set to False, unless :data:`FLAGS` says otherwise. A value the command line spells
otherwise than Python (``--shard-size 256MiB`` for ``shard_bytes=268435456``, ``--split train=a.tsv``
for ``split_files={'train': 'a.tsv'}``) is given both ways: ``option(keyword, value, typed=...)``.
Several options at once are :func:`options`; a whole call that fixes it (``layercache extract ...
--repair``, ``extract(..., repair=True)``) is :func:`call`. The audience is the process's for the
duration of the block, threads included: a background writer's refusal, re-raised by the command,
names flags too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_depth = 0
"""How many :func:`speaking_to_command_line` blocks are open (a command may run another's code)."""
_lock = threading.Lock()

_UNSET = object()

FLAGS: dict[str, str] = {
    "quality_examples": "--quality-sample",
}
"""Keyword -> flag, for the command options outside a spec whose flag is not the keyword with dashes (a spec's own
are declared from its :class:`~layercache.core.option_specs.Flag`'s into :data:`DECLARED_FLAGS`)."""


@dataclass(frozen=True)
class DeclaredFlag:
    """How the command line spells a library keyword that an options spec declares."""

    spelling: str
    """The flag: ``--train-act`` (of ``--train-act/--no-train-act``)."""
    negated: bool = False
    """The flag turns the keyword off: ``--separate-mixers`` is ``share_mixer=False``."""


DECLARED_FLAGS: dict[str, DeclaredFlag] = {}
"""Library keyword -> its flag, for every keyword an options spec declares (``layercache.core.option_specs``
fills it): what :func:`flag` names."""


def declare_flag(keyword: str, declared: DeclaredFlag, owner: str) -> None:
    """Record how the command line spells ``keyword`` (``owner``: the spec field declaring it, for the refusal): a
    second spelling of one keyword is refused, since a message could name only one."""
    known = DECLARED_FLAGS.setdefault(keyword, declared)
    if known != declared:
        raise TypeError(f"{owner} spells {keyword}'s flag {declared.spelling}, another spec {known.spelling}")


@contextmanager
def speaking_to_command_line() -> Iterator[None]:
    """Within the block, :func:`option` names flags (``--overwrite``); outside it, keywords (``overwrite=True``)."""
    global _depth
    with _lock:
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1


def command_line() -> bool:
    """Whether the messages made now are read on a command line (inside :func:`speaking_to_command_line`)."""
    return _depth > 0


def flag(keyword: str, value: object = _UNSET) -> str:
    """The command-line flag of ``keyword`` (``--no-<flag>`` for ``value`` False), as :func:`option` names it there."""
    declared = DECLARED_FLAGS.get(keyword)
    if declared is not None and declared.negated:  # --separate-mixers is share_mixer=False
        return declared.spelling if value is not True else f"(without {declared.spelling})"
    name = declared.spelling if declared is not None else FLAGS.get(keyword, "--" + keyword.replace("_", "-"))
    if value is False:
        return "--no-" + name.removeprefix("--")
    if value is _UNSET or value is True:
        return name
    return f"{name} {value}"


def option_name(keyword: str) -> str:
    """The option ``keyword`` as a message names it: ``--batch-size`` on the command line, ``batch_size`` to Python."""
    return flag(keyword) if command_line() else keyword


def option(keyword: str, value: object = _UNSET, *, typed: str | None = None) -> str:
    """How a message names the option ``keyword`` (set to ``value``, when the message asks for a value).

    On the command line: ``--storage-dtype int8``, ``--overwrite``, ``--no-labels`` (``value`` False), and
    ``typed`` in place of ``value`` when given: how the flag's value is written there (``--max-train all``
    for ``max_train=None``, ``--label-column NAME`` for ``label_columns=...``). To Python:
    ``storage_dtype='int8'``, ``overwrite=True``, ``labels=False``, ``out='runs/a'`` for a path, and ``out=...``
    when no value is given.
    """
    if command_line():
        return flag(keyword, value if typed is None else typed)
    if value is _UNSET:
        return f"{keyword}=..."
    return f"{keyword}={os.fspath(value) if isinstance(value, os.PathLike) else value!r}"


def options(**values: object) -> str:
    """Several options set at once, in order: ``--dtype float32 --overwrite`` or ``dtype='float32', overwrite=True``."""
    return (" " if command_line() else ", ").join(option(keyword, value) for keyword, value in values.items())


def call(function: str, **values: object) -> str:
    """The call of ``function`` with ``values`` set, in backticks: ```layercache extract ... --repair``` on the
    command line (the command is the function's name with dashes), ```extract(..., repair=True)``` to Python."""
    if command_line():
        return f"`layercache {function.replace('_', '-')} ... {options(**values)}`"
    return f"`{function}(..., {options(**values)})`"
