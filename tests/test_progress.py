"""Progress (layercache/progress.py): at 80 and 60 columns every row keeps what runs, how far, the time elapsed and
the time left, with no ellipsis; in a pipe, a plain line with the same facts at a steady interval, and nothing for
work shorter than it. A fake clock drives every time shown."""

from __future__ import annotations

import io

import pytest
from console_support import narrow
from rich.console import Console

from layercache import progress
from layercache.errors import ConfigError


class Clock:
    """A clock the test moves (``now``), for the displays' ``get_time``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rendered(bar: progress.WorkProgress, width: int) -> str:
    """What ``bar`` draws on a console ``width`` columns wide."""
    console = narrow(width)
    console.print(bar.get_renderable())
    return console.export_text()


def assert_fits(text: str, width: int) -> None:
    assert "…" not in text, text
    assert all(len(line.rstrip()) <= width for line in text.splitlines()), text


@pytest.mark.parametrize("width", [80, 60])
def test_training_shows_epoch_step_times_and_named_tasks(width):
    clock = Clock()
    with progress.training_progress(False, epochs=20, total=2000, get_time=clock) as bar:
        bar.epoch(11)
        clock.now = 700.0
        bar.bar.update(bar.task, completed=1100)
        bar.validated(11, {"sentiment": ("accuracy", 0.935), "negation_scope": ("span_f1", 0.542),
                           "intensity": ("pearson", 0.7)})
        bar.epoch(12)
        clock.now = 754.0
        for _ in range(134):
            bar.step(0.4321)
        text = rendered(bar.bar, width)
    assert_fits(text, width)
    first = text.splitlines()[0]
    assert "epoch 12/20" in first and "step 1,234/2,000" in first
    assert "12:34 elapsed" in first and "7:48 left" in first  # 766 steps at 1,234 steps per 754 s
    flat = " ".join(text.split())
    for shown in ("loss 0.4321", "validation after epoch 11:", "sentiment accuracy 0.9350",
                  "negation_scope span_f1 0.5420", "intensity pearson 0.7000"):
        assert shown in flat, text


def test_a_resumed_training_counts_its_time_left_from_where_it_resumed():
    clock = Clock()
    with progress.training_progress(False, epochs=4, total=400, step=200, first_epoch=3, get_time=clock) as bar:
        clock.now = 10.0
        for _ in range(50):
            bar.step(0.5)
        text = rendered(bar.bar, 80)
    assert "epoch 3/4" in text and "step 250/400" in text and "0:10 elapsed, 0:30 left" in text


@pytest.mark.parametrize("width", [80, 60])
def test_extraction_shows_each_split_with_counts_times_and_rates(width):
    clock = Clock()
    with progress.extraction_progress(False, get_time=clock) as bars:
        train = bars.add_task("train", total=67_349, tokens=0, tokens_start=0)
        clock.now = 300.0
        bars.update(train, completed=67_349, tokens=1_000_000)
        validation = bars.add_task("validation", total=234_567, tokens=0, tokens_start=0)
        clock.now = 400.0
        bars.update(validation, completed=123_456, tokens=3_000_000)
        text = rendered(bars, width)
    assert_fits(text, width)
    lines = text.splitlines()
    assert "train" in lines[0] and "67,349/67,349 examples" in lines[0] and "done in 5:00" in lines[0]
    assert "validation" in lines[1] and "123,456/234,567 examples" in lines[1]
    assert "1:40 elapsed" in lines[1] and "1:30 left" in lines[1]
    assert "1,235 examples/s, 30,000 tokens/s" in text  # the running split's rates


@pytest.mark.parametrize("width", [80, 60])
def test_steps_name_the_step_running(width):
    clock = Clock()
    with progress.steps_progress(False, 12, "probe-report", get_time=clock) as step:
        step("sentiment: linear probes")
        step("sentiment: MDL")
        clock.now = 83.0
        step("negation_scope: linear probes on 4,000 of 9,000 words")
        text = rendered(step.bar, width)
    assert_fits(text, width)
    assert "probe-report" in text and "step 3/12" in text and "1:23 elapsed, 6:55 left" in text
    assert "negation_scope: linear probes on 4,000 of 9,000 words" in text


def test_a_time_budget_bounds_the_time_left():
    clock = Clock()
    with progress.steps_progress(False, 10, "sweep", seconds_left=300.0, get_time=clock) as step:
        step("adaptive, seed 0")
        assert "0:00 elapsed, 5:00 left" in rendered(step.bar, 80)  # no rate yet: the budget
        clock.now = 10.0
        step("scalar, seed 0")  # nine steps at 10 s each: 1:30, inside the budget
        assert "0:10 elapsed, 1:30 left" in rendered(step.bar, 80)
        clock.now = 100.0
        step("last, seed 0")  # eight at 50 s each would take 6:40; the budget ends in 3:20
        assert "1:40 elapsed, 3:20 left" in rendered(step.bar, 80)


def test_a_console_too_narrow_for_the_numbers_wraps_them_rather_than_cutting():
    with progress.training_progress(False, epochs=20, total=2000) as bar:
        text = rendered(bar.bar, 30)
    assert "…" not in text and "epoch 1/20" in text and "step 0/2,000" in " ".join(text.split())


def played(total: int, updates: list[tuple[float, dict]], *, interval: float = 30.0, enabled: bool = True) -> list[str]:
    """The lines a training display writes to a pipe (not a terminal) as ``updates`` (time, ``update`` keywords)
    come in, in order."""
    clock, out = Clock(), io.StringIO()
    console = Console(file=out, width=80)
    assert not progress.shows_progress(console)
    with progress.progress_bar("training", progress.steps_count("step"), enabled=enabled, console=console,
                               interval=interval, get_time=clock) as bar:
        task = bar.add_task("epoch 1/2", total=total)
        for when, changes in updates:
            clock.now = when
            bar.update(task, **changes)
    return out.getvalue().splitlines()


def test_a_pipe_gets_a_plain_line_at_each_interval_and_one_at_the_end():
    lines = played(100, [(29.0, {"completed": 20}), (30.0, {"completed": 25}),
                         (45.0, {"completed": 40, "description": "epoch 2/2"}), (60.0, {"completed": 50}),
                         (70.0, {"completed": 100})])  # ends between two lines
    assert lines == ["training epoch 1/2: step 25/100 (25%), 0:30 elapsed, 1:30 left",
                     "training epoch 2/2: step 50/100 (50%), 1:00 elapsed, 1:00 left",
                     "training epoch 2/2: step 100/100 (100%), done in 1:10"]


def test_work_shorter_than_the_interval_writes_nothing():
    assert played(10, [(29.0, {"completed": 10})]) == []


def test_a_quiet_display_writes_nothing_in_a_pipe():
    assert played(10, [(100.0, {"completed": 5}), (200.0, {"completed": 10})], interval=0, enabled=False) == []


def test_the_interval_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(progress.INTERVAL_VARIABLE, raising=False)
    assert progress.line_interval() == progress.DEFAULT_INTERVAL_S
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "0.5")
    assert progress.line_interval() == 0.5
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv(progress.INTERVAL_VARIABLE, bad)
        with pytest.raises(ConfigError, match=f"{progress.INTERVAL_VARIABLE} must be the seconds between"):
            progress.line_interval()


@pytest.mark.parametrize("seconds, shown", [(None, "?"), (0, "0:00"), (45.9, "0:45"), (723, "12:03"),
                                            (3723, "1:02:03")])
def test_clock(seconds, shown):
    assert progress.clock(seconds) == shown
