"""Progress bars for long work (rich), with throughput columns people check first."""

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
    console = Console(file=sys.stderr)
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        RateColumn(None, "ex"), RateColumn("tokens", "tok"), TimeElapsedColumn(), TimeRemainingColumn(),
        console=console, disable=not enabled, transient=False,
    )
    with progress:
        yield progress


@contextmanager
def checking_progress(enabled: bool = True, total: int = 0):
    """A bar for re-reading shards against their checksums; yields ``advance(n_bytes)``."""
    console = Console(file=sys.stderr)
    progress = Progress(
        TextColumn("[bold]checking shards"), BarColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        console=console, disable=not enabled or total == 0, transient=True,
    )
    with progress:
        task = progress.add_task("check", total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def steps_progress(enabled: bool = True, total: int = 0, title: str = "report"):
    """A bar over a known number of named steps; yields ``step(description)``, called as each step starts.

    The bar shows the step now running, so a slow one is named while it runs.
    """
    console = Console(file=sys.stderr)
    progress = Progress(
        TextColumn(f"[bold]{title}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), console=console, disable=not enabled, transient=False,
    )
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
