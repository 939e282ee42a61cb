"""The typer app every command registers on, its consoles, and the one way a command fails.

Every user-caused problem arrives here as a :class:`~layercache.errors.LayercacheError` and is
printed as one sentence with exit code 2; no traceback for the user's own mistakes.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import sys
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from ..core.files import NO_SPACE, why_unwritable
from ..core.option_names import speaking_to_command_line
from ..errors import LayercacheError
from ..progress import line_interval


def _flags_show_no_value() -> None:
    """In ``--help``, show no type after a flag: typer's rich help prints ``--json <bool>`` as if it took a value.

    typer's plain help already leaves it out (``get_help_record``); its rich panel asks
    ``display_type_rich``, which answers ``<bool>`` for every flag, ``--help`` included.
    """
    from typer.core import TyperOption

    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "_layercache_flags", False):
        return  # a typer whose rich help asks no such method (other versions): nothing to correct

    def display_type_rich(self, ctx):
        if self.is_flag or self.count:
            return None
        return original(self, ctx)

    display_type_rich._layercache_flags = True
    TyperOption.display_type_rich = display_type_rich


_flags_show_no_value()
app = typer.Typer(
    help="Run a frozen transformer once, cache every layer's states, and learn from the cache.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
# Commands print through these module attributes (``base.out_console``), so tests can swap them.
out_console = Console()
err_console = Console(stderr=True)
EXIT_USAGE = 2
"""Exit code of a command refused for the user's input (click's own usage errors use it too)."""
EXIT_INTERRUPTED = 130


def friendly(command):
    """Turn LayercacheError into one red sentence and exit code 2; Ctrl-C into a resume hint. Under torchrun,
    only rank 0 prints (:func:`spoken_by_rank_zero`)."""
    command = spoken_by_rank_zero(command)

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        _setup_logging()
        try:
            line_interval()  # a malformed LAYERCACHE_PROGRESS_INTERVAL is refused before any work is done
            with speaking_to_command_line():  # the library's refusals name --flags here, not keywords
                return command(*args, **kwargs)
        except LayercacheError as err:
            if follower_rank() and getattr(err, "reported_by_rank_zero", False):
                raise typer.Exit(EXIT_USAGE) from None  # rank 0 prints it, for every rank
            # escaped: a sentence may hold brackets (pip install 'layercache[compress]'), which are not markup
            err_console.print(f"[bold red]Error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_USAGE) from None
        except OSError as err:
            # The file system's refusals that no library call turned into a sentence of its own (a disk that
            # fills while a report or a figure is written): say which file and why, never a traceback.
            if err.errno not in ENVIRONMENT_ERRNOS:
                raise
            err_console.print(f"[bold red]Error:[/] {escape(file_system_refusal(err))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt as err:  # a RunInterrupted (train-head, sweep) says itself what was kept
            if follower_rank():  # Ctrl-C reaches every rank; rank 0 says what was kept
                raise typer.Exit(EXIT_INTERRUPTED) from None
            err_console.print(str(err) or INTERRUPTED.get(command.__name__, INTERRUPTED_ELSE), highlight=False,
                              soft_wrap=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


INTERRUPTED = {"extract": "Interrupted; committed shards are kept, run the same command again to resume."}
"""What Ctrl-C keeps, per command whose library call does not say it itself (a ``RunInterrupted`` does)."""
INTERRUPTED_ELSE = "Interrupted before anything was written; run the same command again."
"""Ctrl-C in any other command: it writes its output whole at the end, or not at all (a run folder says more)."""


def follower_rank() -> bool:
    """Whether this process is one of torchrun's ranks other than rank 0 (``RANK``, ``WORLD_SIZE``)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1 and int(os.environ.get("RANK", "0")) != 0
    except ValueError:
        return False


def spoken_by_rank_zero(command):
    """``command``, silent on a torchrun rank other than 0: every rank runs the same command, and each line
    printed once per rank buries the one that matters. Such a rank prints only its own failures: its log
    records at ERROR and the error it ends with (:func:`friendly` prints that, after this has returned),
    unless the error says what rank 0 reports for every rank (``reported_by_rank_zero``)."""

    @functools.wraps(command)
    def silent_unless_rank_zero(*args, **kwargs):
        if not follower_rank():
            return command(*args, **kwargs)
        with _only_errors():
            return command(*args, **kwargs)

    return silent_unless_rank_zero


@contextmanager
def _only_errors():
    """Both consoles quiet, and the log's records below ERROR dropped (errors on a console of their own)."""
    handlers = [h for h in logging.getLogger("layercache").handlers if isinstance(h, RichHandler)]
    before = out_console.quiet, err_console.quiet, [(h, h.level, h.console) for h in handlers]
    out_console.quiet = err_console.quiet = True
    errors = Console(stderr=True)
    for handler in handlers:
        handler.setLevel(logging.ERROR)
        handler.console = errors
    try:
        yield
    finally:
        out_console.quiet, err_console.quiet = before[0], before[1]
        for handler, level, console in before[2]:
            handler.setLevel(level)
            handler.console = console


ENVIRONMENT_ERRNOS = frozenset((*NO_SPACE, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
                                errno.ENAMETOOLONG, errno.ELOOP))
"""``OSError`` numbers that are the machine's answer, not a bug: the CLI prints them as one sentence."""


def file_system_refusal(err: OSError) -> str:
    """One sentence for an ``OSError`` of :data:`ENVIRONMENT_ERRNOS`: the file, why, and what to do."""
    where = f" {err.filename}" if err.filename else ""
    if err.errno in NO_SPACE:
        fix = "free space on that disk (or choose another --out) and run the same command again"
    else:
        fix = "fix the path or its permissions (or choose another --out) and run the same command again"
    return f"The file system refused{where} ({why_unwritable(err)}); {fix}."


def _setup_logging() -> None:
    logger = logging.getLogger("layercache")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        logger.addHandler(RichHandler(console=err_console, show_time=False, show_path=False, markup=False))
        logger.setLevel(logging.INFO)
        logger.propagate = False
    # transformers' own weight-loading bars and notices would clutter ours: told by its environment variables before
    # it loads (importing it here cost every command, a refusal too, seconds of start-up), or directly when it has
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
