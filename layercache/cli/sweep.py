"""``sweep``: train candidate heads from a cache inside a time budget, print the leaderboard, keep the winner."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..heads.head_options import TRAIN_SPLIT, HeadOptions
from ..heads.sweeps.sweep_options import SweepOptions
from ..report.tables import Column, print_fitted
from . import base
from .base import app, friendly
from .options import (
    cache_argument,
    check_before_loading,
    memory_budget_option,
    overwrite_option,
    parse_memory_budget,
    quiet_option,
    test_split_option,
    threads_option,
    train_split_option,
    val_split_option,
)
from .parsing import split_list
from .spec_options import field_option, spec_options, takes_specs
from .threads import apply_threads

SHARED = ("tasks", "metric", "class_weight", "epochs", "batch_size", "patience", "device")
"""The head's settings (:class:`~layercache.heads.head_options.HeadOptions`) ``sweep`` types and gives every candidate
alike; the sweep chooses the others itself or leaves them at their defaults."""
ALIASED = {"budget": "-b", "mixers": "-m"}
"""The sweep's own settings (:class:`~layercache.heads.sweeps.sweep_options.SweepOptions`) typed with a one-letter
alias too, which a spec's flag does not spell: typed as their own parameters (:func:`aliased_option`), the others
through the spec."""


def aliased_option(name: str):
    """The option of the ``SweepOptions`` field ``name`` (its flag, help and default), answering to its alias too."""
    option = field_option(SweepOptions, name, "sweep")
    option.param_decls = (*option.param_decls, ALIASED[name])
    return option


@app.command("sweep")
@friendly
@takes_specs("sweep")
def sweep(
    cache: Optional[Path] = cache_argument(),
    budget: str = aliased_option("budget"),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Sweep folder: sweep.json and the winner's run folder best/.",
        show_default="a new <cache>.runs/sweep-<n> beside the cache"),
    mixer: Optional[list[str]] = aliased_option("mixers"),
    options: SweepOptions = spec_options(SweepOptions, skip=tuple(ALIASED)),
    head: HeadOptions = spec_options(
        HeadOptions, only=SHARED, epochs={"help": "Most epochs per run (early stopping may end sooner)."},
        metric={"help": "Validation metric that ranks the candidates (and selects each run's epoch).",
                "after": "NAME for every task, or TASK=NAME per task (repeatable)."}),
    train_split: str = train_split_option(TRAIN_SPLIT),
    val_split: Optional[str] = val_split_option(" (ranks the candidates)"),
    test_split: Optional[str] = test_split_option(),
    overwrite: bool = overwrite_option("sweep folder"),
    memory_budget: Optional[str] = memory_budget_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Train many heads from a cache inside a time budget: prints the leaderboard, keeps the best run."""
    from ..core.units import parse_duration

    seconds = parse_duration(budget, "--budget")  # refused before the cache is opened
    memory = parse_memory_budget(memory_budget)
    shared = {name: getattr(head, name) for name in SHARED if name != "tasks"}  # every candidate's
    own = replace(options, budget=seconds, mixers=split_list(mixer) or None)
    check_before_loading(cache, threads, [(HeadOptions, shared), (SweepOptions, asdict(own))])
    apply_threads(threads)
    from ..heads.sweeps.sweep import sweep as run_sweep

    result = run_sweep(
        cache, out=out, tasks=head.tasks, **asdict(own), split=train_split, val_split=val_split,
        test_split=test_split, overwrite=overwrite, progress=not quiet, memory_budget=memory, **shared)
    render_leaderboard(result, base.out_console)
    base.out_console.print(f"Best run written: [bold]{result.best}[/]; leaderboard: {result.out / 'sweep.json'}",
                           soft_wrap=True)


def describe_pick(pick: dict) -> str:
    """``adaptive, seeds 0, 1, 2 averaged`` or ``adaptive, seed 1``: what best/ holds."""
    seeds = ", ".join(str(s) for s in pick["seeds"])
    if pick["kind"] == "seeds":
        return f"{pick['candidate']}, seeds {seeds} averaged"
    return f"{pick['candidate']}, seed {seeds}"


def _score(mean: float | None, sd: float | None) -> str:
    if mean is None or not math.isfinite(mean):
        return "" if mean is None else str(mean)
    return f"{mean:.4f}" + (f" ± {sd:.4f}" if sd is not None else "")


def _versus(compared: dict | None) -> str:
    """``+0.0043, 71%``: a variant's lead over its default and the share of resamples it won."""
    if compared is None:
        return ""
    return f"{compared['difference']:+.4f}, {compared['p_better']:.0%}"


def render_leaderboard(result, console: Console) -> None:
    """The leaderboard, best first: candidate, validation and test score (mean ± sd over seeds), seeds, time."""
    from ..core.units import human_seconds

    selection = result.selection.get("score", "")
    budget = "no budget" if result.budget is None else f"budget {human_seconds(result.budget)}"
    by = "its seeds averaged" if result.ranking == "averaged" else "the mean of its seeds"
    title = (f"sweep: {len(result.leaderboard)} candidates in {human_seconds(result.elapsed)} ({budget}); ranked by "
             f"{selection} on {result.validation}, each candidate by {by}")
    notes = any(row.note for row in result.leaderboard)
    averaged = any(row.averaged for row in result.leaderboard)
    versus = any(row.versus_default for row in result.leaderboard)
    test_name = result.test_split or "test"
    columns = ["#", "candidate", "validation", test_name, "seeds", "time"]
    columns += ["averaged"] if averaged else []
    columns += ["vs default"] if versus else []
    columns += ["note"] if notes else []
    convex = any(row.deterministic for row in result.leaderboard)
    captions = ["* fitted by the convex solver: deterministic, so one seed"] if convex else []
    if averaged:
        shown = "validation" if result.test_split is None else f"validation / {test_name}"
        captions.append(f"averaged: {shown} of the seeds' runs averaged as one model (--pick seeds)")
    if versus:
        captions.append(f"vs default: a variant's validation lead over its mixer's default, and the share of paired "
                        f"bootstrap resamples it wins; it is kept over its default only from {result.confidence:.0%} "
                        "(--confidence)")
    caption = "\n".join(captions) or None
    rows = []
    for rank, row in enumerate(result.leaderboard, start=1):
        seeds = "1*" if row.deterministic else str(len(row.seeds))
        cells = [str(rank), row.candidate, _score(row.validation_mean, row.validation_sd),
                 _score(row.test_mean, row.test_sd), seeds, human_seconds(row.seconds)]
        if averaged:
            scores = [] if not row.averaged else [row.averaged["validation"], row.averaged["test"]]
            cells.append(" / ".join(_score(v, None) for v in scores if v is not None))
        if versus:
            cells.append(_versus(row.versus_default))
        rows.append([*cells, *([row.note] if notes else [])])
    # At the console's width: scores whole, the note wrapped, a wide board split into parts naming each candidate.
    print_fitted(console, [Column(c, key=c in ("#", "candidate"), wrap=c == "note") for c in columns], rows,
                 title=title, caption=caption)
    if result.ensemble is not None:
        members = ", ".join(m["candidate"] for m in result.ensemble["members"])
        console.print(f"ensemble of {len(result.ensemble['members'])} ({members}): validation "
                      f"{_score(result.ensemble['validation'], None)}, {test_name} "
                      f"{_score(result.ensemble['test'], None)}; written to {result.ensemble['run']}", soft_wrap=True)
    winner, leader = result.winner, result.leader
    if winner is not leader:
        lead = leader.versus_default
        console.print(f"best/ holds {winner.candidate}, not the leader {leader.candidate}: its lead over "
                      f"{lead['default']} ({lead['difference']:+.4f}) won {lead['p_better']:.0%} of the paired "
                      f"resamples of the validation rows, under the {result.confidence:.0%} a variant needs.",
                      soft_wrap=True)
    if result.pick is not None:
        console.print(f"best/: {describe_pick(result.pick)}: validation {_score(result.pick['validation'], None)}, "
                      f"{test_name} {_score(result.pick['test'], None)}", soft_wrap=True)
    if result.skipped:
        console.print(f"{len(result.skipped)} candidate(s) not run or not counted; see skipped in sweep.json "
                      f"(first: {result.skipped[0]['candidate']}: {result.skipped[0]['reason']}).", soft_wrap=True)
    from ..heads.sweeps.budget import describe_feeds

    console.print(describe_feeds(result.feeds), style="dim")
