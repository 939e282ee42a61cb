"""How long work is shown: a bar where it can redraw, a plain line at a steady interval where it cannot.

Every display layercache shows is made here (:class:`WorkProgress`, through the factories below), so every one
follows the same rules:

- It says the same facts everywhere: what runs (``epoch 3/20``, a split's name, ``probe-report``), how far it
  is (``step 120/800``, ``12,345/67,349 examples``), the time elapsed and the time left (from the mean rate
  since the work started), and below them the figures that change as it runs (the loss and the validation
  scores by task, examples and tokens per second, the step now running).
- In a terminal (not a dumb one) or a notebook it is a bar on stderr, laid out for the console's width: the
  numbers and times keep their full text and the bar takes what is left (none on a very narrow console); a
  line that still does not fit wraps. Nothing is cut to an ellipsis (rich's own columns collapse to
  ``e… los… val accuracy …`` at 80 columns).
- In a pipe or a log file a bar is residue (rich prints its last frame there, cut to 80 columns), so it writes
  one plain line per running task every :data:`INTERVAL_VARIABLE` seconds instead (default 30), and one when a
  task ends: ``training epoch 3/20: step 120/800 (15%), 0:45 elapsed, 4:15 left; loss 0.4321``. Work shorter
  than the interval writes nothing. Lines go to stderr, so stdout stays the command's result.
- ``enabled=False`` (``--quiet``) shows nothing at all.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from contextlib import contextmanager
from typing import Callable

from rich.console import Console
from rich.filesize import decimal
from rich.progress import Progress, Task, TaskID
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .errors import ConfigError

INTERVAL_VARIABLE = "LAYERCACHE_PROGRESS_INTERVAL"
"""Seconds between the plain progress lines written to a pipe or a log (0: at every update)."""
DEFAULT_INTERVAL_S = 30.0
MIN_BAR, MAX_BAR = 6, 40
"""Bar widths: narrower than MIN_BAR it is left out (the numbers say it all), never wider than MAX_BAR."""

Count = Callable[[Task], str]
"""How far a task is, as text: ``step 120/800``."""
Detail = Callable[[Task], "str | None"]
"""What changes as a task runs (the loss, a rate, the step running), or None."""


def shows_progress(console: Console) -> bool:
    """Whether a bar on ``console`` can redraw in place: a terminal that is not dumb, or a notebook."""
    return console.is_jupyter or (console.is_terminal and not console.is_dumb_terminal)


def line_interval() -> float:
    """Seconds between plain progress lines: :data:`INTERVAL_VARIABLE`, else :data:`DEFAULT_INTERVAL_S`."""
    text = os.environ.get(INTERVAL_VARIABLE, "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"{INTERVAL_VARIABLE} must be the seconds between progress lines in a pipe or log (0 or "
                          f"more), got {text!r}; e.g. {INTERVAL_VARIABLE}=30.")
    return seconds


def clock(seconds: float | None) -> str:
    """``0:45``, ``12:03``, ``1:02:03``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def time_left(task: Task) -> float | None:
    """Seconds left at the mean rate since the task started (from ``completed_start``), and never past the
    task's ``deadline`` field (a ``get_time`` value: a time budget); None while unknown."""
    done = task.completed - task.fields.get("completed_start", 0)
    left = None
    if task.total is not None and task.elapsed and done > 0:
        left = max(0.0, (task.total - task.completed) * task.elapsed / done)
    deadline = task.fields.get("deadline")
    if deadline is not None:
        budget = max(0.0, deadline - task.get_time())
        left = budget if left is None else min(left, budget)
    return left


def times(task: Task) -> str:
    """``0:45 elapsed, 4:15 left``, or ``done in 5:00``."""
    if task.finished:
        return f"done in {clock(task.finished_time)}"
    return f"{clock(task.elapsed)} elapsed, {clock(time_left(task))} left"


def steps_count(label: str) -> Count:
    """``<label> 120/800``: a count of steps, epochs, candidates."""
    return lambda task: f"{label} {task.completed:,.0f}/{_total(task)}"


def items_count(unit: str) -> Count:
    """``12,345/67,349 <unit>``: a count of examples, texts."""
    return lambda task: f"{task.completed:,.0f}/{_total(task)} {unit}".rstrip()


def running_step(task: Task) -> str:
    """``step 3/12`` while the third of twelve named steps runs (the ``step`` field names it), ``step 12/12`` at
    the end."""
    running = 1 if task.fields.get("step") and not task.finished else 0
    return f"step {task.completed + running:,.0f}/{_total(task)}"


def bytes_count(task: Task) -> str:
    """``1.2 GB/3.4 GB``."""
    return f"{decimal(int(task.completed))}/{'?' if task.total is None else decimal(int(task.total))}"


def _total(task: Task) -> str:
    return "?" if task.total is None else f"{task.total:,.0f}"


class WorkProgress(Progress):
    """rich's ``Progress`` with the rules of the module: one row per task of ``count`` and :func:`times` (and a
    bar), a ``detail`` line below, laid out for any width; plain lines where it cannot redraw.

    Use it as rich's own (``with bar: task = bar.add_task(description, total=...)``, ``bar.update``,
    ``bar.advance``). ``title`` names the work in plain lines (``training``, ``extracting``); a task's
    ``completed_start`` field (default: its ``completed`` when added) is where the time left counts from, so a
    resumed run's estimate is its own. ``interval``: seconds between plain lines (default :func:`line_interval`).
    """

    def __init__(self, title: str, count: Count, detail: Detail | None = None, *, enabled: bool = True,
                 transient: bool = False, console: Console | None = None, interval: float | None = None,
                 get_time: Callable[[], float] | None = None) -> None:
        console = console or Console(file=sys.stderr)
        draws = enabled and shows_progress(console)
        super().__init__(console=console, disable=not draws, transient=transient, get_time=get_time)
        self.title, self.count, self.detail = title, count, detail
        self.lines = _PlainLines(self, line_interval() if interval is None else interval) \
            if enabled and not draws else None

    # --- rich's calls, with the plain lines -----------------------------------------------------
    def add_task(self, description: str, start: bool = True, total: float | None = 100.0, completed: int = 0,
                 visible: bool = True, **fields) -> TaskID:
        """rich's ``add_task``; ``completed_start`` defaults to ``completed``."""
        fields.setdefault("completed_start", completed)
        task = super().add_task(description, start, total, completed, visible, **fields)
        self._tick()
        return task

    def update(self, task_id: TaskID, **changes) -> None:
        """rich's ``update`` (a plain line is written when one is due)."""
        super().update(task_id, **changes)
        self._tick()

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        """rich's ``advance`` (a plain line is written when one is due)."""
        super().advance(task_id, advance)
        self._tick()

    def start(self) -> None:
        """Start drawing, or the clock of the plain lines."""
        super().start()
        if self.lines is not None:
            self.lines.start()

    def stop(self) -> None:
        """Stop drawing; in a pipe, a last line for each task when lines were written."""
        if self.lines is not None:
            self.lines.stop()
        super().stop()

    def _tick(self) -> None:
        if self.lines is not None:
            self.lines.tick()

    # --- what is shown -----------------------------------------------------------------------------
    def get_renderables(self):
        """The rows, laid out at render time for the console's width, then the detail lines."""
        yield _Rows(self)

    def plain_line(self, task: Task) -> str:
        """The task's facts in one line: ``<title> <description>: <count> (<percent>), <times>; <detail>``."""
        name = self.title if task.description in ("", self.title) else f"{self.title} {task.description}"
        percent = f" ({task.percentage:.0f}%)" if task.total else ""
        detail = self.detail(task) if self.detail is not None else None
        return f"{name}: {self.count(task)}{percent}, {times(task)}" + (f"; {detail}" if detail else "")


class _Rows:
    """The tasks of a :class:`WorkProgress` as aligned rows fitted to the width they are drawn at."""

    def __init__(self, progress: WorkProgress) -> None:
        self.progress = progress

    def __rich_console__(self, console, options):
        progress = self.progress
        tasks = [t for t in progress.tasks if t.visible]
        if not tasks:
            return
        cells = [(t.description, progress.count(t), times(t)) for t in tasks]
        widths = [max(len(row[i]) for row in cells) for i in range(3)]
        room = options.max_width - sum(widths) - 3  # three separating spaces around the bar
        if room + 1 < 0:  # not even the text fits: plain lines, which wrap rather than cut
            for name, count, spent in cells:
                yield Text(f"{name} {count} {spent}")  # Text: a split's name is never read as markup
        else:
            bar = min(MAX_BAR, room)
            table = Table.grid(padding=(0, 1))
            table.add_column(no_wrap=True, style="bold")
            if bar >= MIN_BAR:
                table.add_column(width=bar, no_wrap=True)
            table.add_column(no_wrap=True, justify="right")
            table.add_column(no_wrap=True, style="progress.elapsed")
            for task, (name, count, spent) in zip(tasks, cells):
                shown = [ProgressBar(total=task.total, completed=task.completed, width=bar, pulse=not task.started,
                                     animation_time=task.get_time())] if bar >= MIN_BAR else []
                table.add_row(Text(name), *shown, Text(count), Text(spent))
            yield table
        if progress.detail is None:
            return
        details = [(t, progress.detail(t)) for t in tasks if not t.finished]
        details = [(t, d) for t, d in details if d]
        for task, detail in details:
            yield Text(detail if len(details) == 1 else f"{task.description}: {detail}", style="dim")


class _PlainLines:
    """Where a bar cannot redraw: one plain line per running task at a steady interval (see the module).

    A line is due ``interval`` seconds after the last (or the start); updates write a due line, and a
    background thread wakes every ``interval`` seconds so that a long step between updates is reported too.
    """

    def __init__(self, progress: WorkProgress, interval: float) -> None:
        self.progress, self.interval = progress, interval
        self.last: float | None = None
        self.written = False
        self.ended: set[TaskID] = set()  # tasks whose end was written
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.last = self.progress.get_time()
        if self.interval > 0:
            self.thread = threading.Thread(target=self._wake, name="layercache-progress-lines", daemon=True)
            self.thread.start()

    def _wake(self) -> None:
        while not self.stopping.wait(self.interval):
            self.tick()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        if self.written:  # the end of work that was reported while it ran
            self.tick(final=True)

    def tick(self, final: bool = False) -> None:
        """Write a line for each task that has not ended (and one for each that just ended) when due."""
        with self.lock:
            now = self.progress.get_time()
            if self.last is None or not final and now - self.last < self.interval:
                return
            self.last = now
            lines = []
            for task in self.progress.tasks:
                if not task.visible or task.id in self.ended:
                    continue
                if task.finished:
                    self.ended.add(task.id)
                lines.append(self.progress.plain_line(task))
            for line in lines:
                self.progress.console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)
            self.written = self.written or bool(lines)


def progress_bar(title: str = "", count: Count | None = None, detail: Detail | None = None, *,
                 enabled: bool = True, transient: bool = False, **display) -> WorkProgress:
    """A :class:`WorkProgress` (``count`` default: ``n/total``); a disabled one takes every call and shows nothing.

    ``display``: :class:`WorkProgress`'s ``console`` (default: stderr), ``interval`` and ``get_time``; each
    factory below passes them on.
    """
    return WorkProgress(title, count or items_count(""), detail, enabled=enabled, transient=transient, **display)


# --- the displays ----------------------------------------------------------------------------------------
class TrainingProgress:
    """The bar of a minibatch training run: the epoch running, the step, the loss and the last validation."""

    def __init__(self, bar: WorkProgress, epochs: int, total: int, step: int, first_epoch: int) -> None:
        self.bar, self.epochs = bar, epochs
        self.task = bar.add_task(f"epoch {first_epoch}/{epochs}", total=total, completed=step, loss=None, val="")

    def epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` starts."""
        self.bar.update(self.task, description=f"epoch {epoch}/{self.epochs}")

    def step(self, loss: float) -> None:
        """A step ended with ``loss`` (its recent mean)."""
        self.bar.update(self.task, advance=1, loss=loss)

    def validated(self, epoch: int, scores: dict[str, tuple[str, float]]) -> None:
        """Epoch ``epoch`` was validated: ``{task: (metric, value)}``."""
        named = ", ".join(f"{task} {metric} {value:.4f}" for task, (metric, value) in scores.items())
        self.bar.update(self.task, val=f"validation after epoch {epoch}: {named}")

    def end_at(self, step: int) -> None:
        """Training stopped at ``step`` (early, or out of time): the bar ends there."""
        self.bar.update(self.task, total=step)


def _training_detail(task: Task) -> str | None:
    loss = task.fields.get("loss")
    parts = ([] if loss is None else [f"loss {loss:.4f}"]) + ([task.fields["val"]] if task.fields.get("val") else [])
    return "; ".join(parts) or None


@contextmanager
def training_progress(enabled: bool = True, *, epochs: int, total: int, step: int = 0, first_epoch: int = 1,
                      **display):
    """A :class:`TrainingProgress` over ``total`` steps of ``epochs`` epochs (``step`` of them done, by a resumed
    fit, whose next epoch is ``first_epoch``)."""
    with progress_bar("training", steps_count("step"), _training_detail, enabled=enabled, **display) as bar:
        yield TrainingProgress(bar, epochs, total, step, first_epoch)


def _rates(task: Task) -> str | None:
    elapsed, done = task.elapsed or 0.0, task.completed - task.fields.get("completed_start", 0)
    if elapsed <= 0 or done <= 0:  # no rate before the first batch
        return None
    examples = done / elapsed
    tokens = (task.fields.get("tokens", 0) - task.fields.get("tokens_start", 0)) / elapsed
    return f"{examples:,.0f} examples/s, {tokens:,.0f} tokens/s"


@contextmanager
def extraction_progress(enabled: bool = True, **display):
    """The display of an extraction: a row per split (examples, elapsed and remaining time), examples and tokens
    per second below. Tasks take ``tokens`` (and ``tokens_start``) fields."""
    with progress_bar("extracting", items_count("examples"), _rates, enabled=enabled, **display) as progress:
        yield progress


@contextmanager
def counting_progress(title: str, enabled: bool = True, total: int | None = None, unit: str = "examples"):
    """A transient display over a count of ``unit`` (texts predicted, examples verified); yields
    ``(advance, set_total)``: ``advance(n)`` adds ``n`` done, ``set_total(n)`` sets how many there are once known.
    """
    with progress_bar(title, items_count(unit), enabled=enabled, transient=True) as progress:
        task = progress.add_task(title, total=total)
        yield (lambda n: progress.advance(task, n)), (lambda n: progress.update(task, total=n))


@contextmanager
def checking_progress(enabled: bool = True, total: int = 0):
    """A transient display of re-reading shards against their checksums; yields ``advance(n_bytes)``."""
    with progress_bar("checking shards", bytes_count, enabled=enabled and total > 0, transient=True) as progress:
        task = progress.add_task("checking shards", total=total)
        yield lambda n: progress.advance(task, n)


def _step_running(task: Task) -> str | None:
    return task.fields.get("step") or None


class StepsProgress:
    """The display of a known number of named steps: called with a step's description as that step starts.

    ``seconds_left``: a time budget the steps end by (a sweep's), which bounds the time left shown.
    """

    def __init__(self, bar: WorkProgress, title: str, total: int, seconds_left: float | None = None) -> None:
        self.bar, self.started = bar, False
        deadline = None if seconds_left is None or not math.isfinite(seconds_left) else bar.get_time() + seconds_left
        self.task = bar.add_task(title, total=total, deadline=deadline)

    def __call__(self, description: str) -> None:
        """The step ``description`` starts (the one before it is done)."""
        self.bar.update(self.task, advance=1 if self.started else 0, step=description)
        self.started = True

    def finish(self) -> None:
        """The last step is done."""
        if self.started:
            self.bar.update(self.task, advance=1, step="")


@contextmanager
def steps_progress(enabled: bool = True, total: int = 0, title: str = "report", seconds_left: float | None = None,
                   **display):
    """A :class:`StepsProgress` over ``total`` named steps (within ``seconds_left``, when they have a budget).

    The row says which step runs (``step 3/12``), the time left counts the steps done, and the line below
    names the step running, so a slow one is named while it runs.
    """
    with progress_bar(title, running_step, _step_running, enabled=enabled, **display) as bar:
        steps = StepsProgress(bar, title, total, seconds_left)
        yield steps
        steps.finish()
