"""``probe-report``: every layer probed from the cache, written as report.json and a self-contained report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.holdout import DEFAULT_MAX_TRAIN
from ..errors import ConfigError
from . import base
from .base import app, friendly
from .options import cache_argument, memory_budget_option, parse_memory_budget, quiet_option, threads_option
from .parsing import split_list
from .threads import apply_threads


@app.command("probe-report")
@friendly
def probe_report(
    cache: Optional[Path] = cache_argument(),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Report folder.", show_default="<cache>.report beside the cache"),
    task: Optional[list[str]] = typer.Option(
        None, "--task", help="Task(s) to probe; repeatable.", show_default="every task in the cache"),
    eval_split: Optional[str] = typer.Option(
        None, "--eval-split", help="Split the scores are reported on.",
        show_default="test when present, else the validation split"),
    run: Optional[list[str]] = typer.Option(
        None, "--run", help="More run folders of this cache to show (those in <cache>.runs are found); repeatable."),
    act_run: Optional[Path] = typer.Option(
        None, "--act-run", help="An act run whose per-token depth to break down by token category.",
        show_default="the newest act run found, else one trained for the report"),
    train_act: bool = typer.Option(
        True, "--train-act/--no-train-act", help="Train an act head for per-token depth when none exists."),
    act_epochs: int = typer.Option(8, "--act-epochs", help="Epochs of that act head."),
    mdl: bool = typer.Option(True, "--mdl/--no-mdl", help="Online-code MDL per layer (the slowest part)."),
    cumulative: bool = typer.Option(True, "--cumulative/--no-cumulative",
                                    help="Cumulative scoring: a probe on the mix of layers 0..l for every l."),
    seed: int = typer.Option(0, "--seed", help="Seed for validation slices, control tasks and samples."),
    max_train: str = typer.Option(
        str(DEFAULT_MAX_TRAIN), "--max-train",
        help="Fit each task's probes on a seeded sample of at most N training examples (words); 0 or all: every one."),
    memory_budget: Optional[str] = memory_budget_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Probe every layer of a cache (no backbone needed): prints a summary, writes report.json and report.html."""
    budget = parse_memory_budget(memory_budget)  # refused before the cache is opened
    apply_threads(threads)
    from ..report.probing import probe_report as run_probe_report
    from ..report.summary import render_probe_summary

    report, paths = run_probe_report(
        cache, out, tasks=split_list(task) or None, eval_split=eval_split, runs=split_list(run),
        act_run=act_run, train_act=train_act, act_epochs=act_epochs, mdl=mdl, cumulative=cumulative, seed=seed,
        max_train=parse_max_train(max_train), progress=not quiet, memory_budget=budget,
        say=lambda line: base.err_console.print(line, highlight=False, soft_wrap=True))
    render_probe_summary(report, base.out_console)
    base.out_console.print(f"Report written: [bold]{paths.html}[/] (data: {paths.json.name})", soft_wrap=True)


def parse_max_train(text: str) -> int | None:
    """``--max-train``: a count of at least 2, or ``0`` / ``all`` for every training example (None)."""
    value = text.strip().lower()
    if value in ("0", "all"):
        return None
    if not value.isdigit() or int(value) < 2:
        raise ConfigError(f"--max-train takes a number of training examples (at least 2), or 0 / all for every "
                          f"one; got {text!r}.")
    return int(value)
