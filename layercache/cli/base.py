"""The typer app every command registers on, its consoles, and the one way a command fails.

Every user-caused problem arrives here as a :class:`~layercache.errors.LayercacheError` and is
printed as one sentence with exit code 2; no traceback for the user's own mistakes.
"""

from __future__ import annotations

import functools
import logging

import typer
from rich.console import Console
from rich.logging import RichHandler

from ..errors import LayercacheError

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
    """Turn LayercacheError into one red sentence and exit code 2; Ctrl-C into a resume hint."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        _setup_logging()
        try:
            return command(*args, **kwargs)
        except LayercacheError as err:
            err_console.print(f"[bold red]Error:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt:
            err_console.print("Interrupted; committed shards are kept, run the same command again to resume.")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def _setup_logging() -> None:
    logger = logging.getLogger("layercache")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        logger.addHandler(RichHandler(console=err_console, show_time=False, show_path=False, markup=False))
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:  # the library's own weight-loading bars would clutter ours
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
