"""Progress bars for long work (rich), with throughput columns people check first.

Every bar layercache draws is made here (:func:`progress_bar`), so every bar follows one rule: it is
drawn on stderr only when stderr is a terminal (or a notebook). In a pipe or a log file a bar is
residue, not information: rich prints its last frame there, cut to a pipe's 80 columns
(``ep… lo… val accuracy …``), between the lines a script reads.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


def shows_progress(console: Console) -> bool:
    """Whether a bar on ``console`` can redraw in place: a terminal that is not dumb, or a notebook."""
    return console.is_jupyter or (console.is_terminal and not console.is_dumb_terminal)


def progress_bar(*columns: str | ProgressColumn, enabled: bool = True, transient: bool = False) -> Progress:
    """A rich ``Progress`` on stderr with ``columns``, disabled unless ``enabled`` and stderr shows bars.

    Use it as rich's own (``with bar: bar.add_task(...)``); a disabled bar takes every call and
    draws nothing. ``transient`` clears the bar when it stops, leaving only what follows.
    """
    console = Console(file=sys.stderr)
    return Progress(*columns, console=console, disable=not (enabled and shows_progress(console)),
                    transient=transient)


class RateColumn(ProgressColumn):
    """``<n> <unit>/s`` from a task field (``completed`` or a custom counter)."""

    def __init__(self, field: str | None, unit: str):
        super().__init__()
        self.field, self.unit = field, unit

    def render(self, task: Task) -> Text:
        """The rate since the task's ``<field>_start`` value, averaged over its elapsed time."""
        elapsed = task.elapsed or 0.0
        value = task.completed if self.field is None else task.fields.get(self.field, 0)
        start = task.fields.get((self.field or "completed") + "_start", 0)
        rate = (value - start) / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} {self.unit}/s", style="progress.data.speed")


@contextmanager
def extraction_progress(enabled: bool = True):
    """A progress display for extraction: examples, examples/s, tokens/s, elapsed and remaining time."""
    progress = progress_bar(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        RateColumn(None, "ex"), RateColumn("tokens", "tok"), TimeElapsedColumn(), TimeRemainingColumn(),
        enabled=enabled)
    with progress:
        yield progress


@contextmanager
def counting_progress(title: str, enabled: bool = True, total: int | None = None):
    """A transient bar over a count of items (texts predicted, examples verified); yields ``(advance, set_total)``.

    ``advance(n)`` adds ``n`` done items, ``set_total(n)`` sets how many there are once known.
    """
    progress = progress_bar(TextColumn(f"[bold]{title}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            enabled=enabled, transient=True)
    with progress:
        task = progress.add_task(title, total=total)
        yield (lambda n: progress.advance(task, n)), (lambda n: progress.update(task, total=n))


@contextmanager
def checking_progress(enabled: bool = True, total: int = 0):
    """A bar for re-reading shards against their checksums; yields ``advance(n_bytes)``."""
    progress = progress_bar(TextColumn("[bold]checking shards"), BarColumn(), TimeElapsedColumn(),
                            TimeRemainingColumn(), enabled=enabled and total > 0, transient=True)
    with progress:
        task = progress.add_task("check", total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def steps_progress(enabled: bool = True, total: int = 0, title: str = "report"):
    """A bar over a known number of named steps; yields ``step(description)``, called as each step starts.

    The bar shows the step now running, so a slow one is named while it runs.
    """
    progress = progress_bar(TextColumn(f"[bold]{title}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.description}"), TimeElapsedColumn(), enabled=enabled)
    with progress:
        task = progress.add_task("", total=total)
        started = [False]

        def step(description: str) -> None:
            if started[0]:
                progress.advance(task)
            started[0] = True
            progress.update(task, description=description)

        yield step
        if started[0]:
            progress.advance(task)
        progress.update(task, description="done")
