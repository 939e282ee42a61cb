"""Commands that learn from a cache or score what was learned: ``train-head`` and ``eval``."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError
from ..heads.head_options import DEFAULT_MIXER, TRAIN_SPLIT, HeadOptions
from . import base
from .base import app, friendly
from .choices import choice_help
from .options import (
    allow_pickle_option,
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
from .spec_options import spec_options, takes_specs
from .threads import apply_threads

LIVE_NOTE = " (live backbone)"


@app.command("train-head")
@friendly
@takes_specs("train-head")
def train_head(
    cache: Optional[Path] = cache_argument(),
    mixer: str = typer.Option(DEFAULT_MIXER, "--mixer", "-m", help=choice_help(
        "train-head", "--mixer", "How the head combines the cached states.")),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Run folder.", show_default="a new folder beside the cache"),
    train_split: str = train_split_option(TRAIN_SPLIT),
    val_split: Optional[str] = val_split_option(),
    test_split: Optional[str] = test_split_option(),
    head: HeadOptions = spec_options(HeadOptions),
    overwrite: bool = overwrite_option("run folder"),
    live: bool = typer.Option(
        False, "--live", help="Compute every batch with the cache's backbone instead of reading stored states "
                              "(the reference for end-to-end checks; metrics.json records it)."),
    allow_pickle: bool = allow_pickle_option(),
    memory_budget: Optional[str] = memory_budget_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Learn a head on a cache (no backbone needed): prints metrics and layer weights, writes a run folder."""
    if allow_pickle and not live:
        raise ConfigError("--allow-pickle loads the cache's backbone, which only train-head --live does: add --live, "
                          "or leave --allow-pickle out (a head on stored states loads no model).")
    budget = parse_memory_budget(memory_budget)  # refused before anything is read
    check_before_loading(cache, threads, [(HeadOptions, asdict(head))])
    apply_threads(threads)
    from ..report.heads import render_layer_weights, render_metrics

    run = {"out": out, "split": train_split, "val_split": val_split, "test_split": test_split, "overwrite": overwrite,
           "memory_budget": budget, **asdict(replace(head, progress=not quiet))}
    if live:
        from ..live.training import train_head_live

        result = train_head_live(cache, mixer, allow_pickle=allow_pickle, **run)
    else:
        from ..heads.workflow import train_head as train_from_cache

        result = train_from_cache(cache, mixer, **run)
    m = result.files.metrics  # what metrics.json holds, as its typed section
    shown = {"validation": m.validation or {}}
    if m.test is not None:
        shown[m.scored_on] = m.test  # the test split's name
    selection = result.head.selection_
    render_metrics(shown, base.out_console, primary=dict(selection.metrics),
                   title=f"{mixer}{LIVE_NOTE if live else ''} (normalize {m.normalize}): "
                         f"{result.head.history_.summary(selection.describe())}, "
                         f"{m.train_seconds:.1f} s; validation = {m.validated_on}")
    render_layer_weights(result.files.layer_weights, base.out_console)
    base.out_console.print(f"Run written: [bold]{result.run}[/]", soft_wrap=True)


@app.command("eval")
@friendly
def eval_run(
    run: Path = typer.Argument(..., help="Run folder written by train-head."),
    cache: Optional[Path] = cache_argument(),
    split: str = typer.Option("test", "--split", help="Split to score."),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as JSON."),
    threads: str = threads_option(),
):
    """Score a saved run on a split of a cache (refuses a cache from another backbone)."""
    if cache is not None:  # (without one, the run's own cache)
        check_before_loading(cache, threads)
    apply_threads(threads)
    from ..heads.workflow import evaluate_run
    from ..report.heads import render_layer_weights, render_metrics

    result = evaluate_run(run, cache, split)
    if as_json:
        base.out_console.print_json(json.dumps(result.to_json(), default=float))
        return
    render_metrics({split: result.metrics}, base.out_console, title=f"{run} on {result.cache}",
                   primary=result.primary)
    render_layer_weights(result.weights(), base.out_console)
