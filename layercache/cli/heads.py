"""Commands that learn from a cache or score what was learned: ``train-head`` and ``eval``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError
from . import base
from .base import app, friendly
from .choices import choice_help
from .options import (
    allow_pickle_option,
    batch_size_option,
    cache_argument,
    class_weight_option,
    device_option,
    epochs_option,
    head_default,
    memory_budget_option,
    metric_option,
    overwrite_option,
    parse_memory_budget,
    patience_option,
    quiet_option,
    task_option,
    test_split_option,
    threads_option,
    train_head_default,
    train_split_option,
    val_split_option,
)
from .parsing import (
    layer_specs,
    parse_assignments,
    parse_class_weight,
    parse_loss_weights,
    parse_metric,
    split_list,
)
from .threads import apply_threads

LIVE_NOTE = " (live backbone)"


@app.command("train-head")
@friendly
def train_head(
    cache: Optional[Path] = cache_argument(),
    mixer: str = typer.Option(train_head_default("mixer"), "--mixer", "-m", help=choice_help(
        "train-head", "--mixer", "How the head combines the cached states.")),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Run folder.", show_default="a new folder beside the cache"),
    task: Optional[list[str]] = task_option(),
    layers: Optional[list[str]] = typer.Option(
        None, "--layers", help="States to read: names or indices; comma-separated.", show_default="all"),
    source: str = typer.Option(head_default("source"), "--source", help=choice_help(
        "train-head", "--source", "What the head reads.", "auto: token states when the cache stores them.")),
    normalize: str = typer.Option(head_default("normalize"), "--normalize", help=choice_help(
        "train-head", "--normalize", "States before mixing.",
        "standardize: per dimension with the train split's statistics; layer_norm: per token; auto: standardize "
        "for pre-LN models such as GPT-2 and Llama, none for BERT-style.")),
    train_split: str = train_split_option(train_head_default("split")),
    val_split: Optional[str] = val_split_option(),
    test_split: Optional[str] = test_split_option(),
    epochs: int = epochs_option(),
    batch_size: int = batch_size_option(),
    lr: Optional[float] = typer.Option(
        None, "--lr", help="Peak learning rate.", show_default="the mixer's and head's default"),
    weight_decay: float = typer.Option(
        head_default("weight_decay"), "--weight-decay", help="AdamW weight decay (never on layer weights)."),
    schedule: str = typer.Option(head_default("schedule"), "--schedule", help=choice_help(
        "train-head", "--schedule", "Learning-rate schedule after warmup.")),
    patience: int = patience_option(),
    metric: Optional[list[str]] = metric_option(
        "train-head", "Validation metric that selects the epoch and stops early.",
        "; a joint head selects on the loss-weighted mean"),
    class_weight: Optional[list[str]] = class_weight_option(),
    solver: str = typer.Option(head_default("solver"), "--solver", help=choice_help(
        "train-head", "--solver", "How the head's weights are fitted.",
        "lbfgs: full batch, the L2 strength C chosen on validation (a linear head on last or layer:<i>); adamw: "
        "minibatches with early stopping (any head); auto: lbfgs where it applies, else adamw.")),
    seed: int = typer.Option(
        head_default("seed"), "--seed", help="Seed for initialisation, order, dropout and the validation slice."),
    seeds: int = typer.Option(
        head_default("seeds"), "--seeds", help="Train N heads (seeds SEED to SEED+N-1) on one validation slice and "
        "predict with their averaged probabilities: steadier and usually better than one seed, N times the training."),
    mixer_option: Optional[list[str]] = typer.Option(
        None, "--mixer-option", help="Mixer setting KEY=VALUE, e.g. k=64, alpha=70, topk=3; repeatable."),
    head_option: Optional[list[str]] = typer.Option(
        None, "--head-option", help="Head setting KEY=VALUE, e.g. pooling=attention, attention_heads=8; repeatable."),
    loss_weight: Optional[list[str]] = typer.Option(
        None, "--loss-weight", help="TASK=WEIGHT for joint training; repeatable."),
    separate_mixers: bool = typer.Option(
        not head_default("share_mixer"), "--separate-mixers", help="One mixer per task instead of one shared."),
    device: str = device_option(),
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
    apply_threads(threads)
    if live:
        from ..live.training import train_head_live as run_train_head
    else:
        from ..heads.workflow import train_head as run_train_head
    from ..report.heads import render_layer_weights, render_metrics

    weights = parse_loss_weights(loss_weight)
    result = run_train_head(
        cache, mixer, out=out, split=train_split, val_split=val_split, test_split=test_split, overwrite=overwrite,
        memory_budget=budget,
        tasks=split_list(task) or None, layers=layer_specs(layers) or None, source=source,
        normalize=normalize,
        mixer_options=parse_assignments(mixer_option, "--mixer-option"),
        head_options=parse_assignments(head_option, "--head-option"), share_mixer=not separate_mixers,
        loss_weights=weights or None, epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay,
        schedule=schedule, patience=patience, seed=seed, seeds=seeds, device=device, progress=not quiet,
        metric=parse_metric(metric), class_weight=parse_class_weight(class_weight), solver=solver,
        **({"allow_pickle": allow_pickle} if live else {}),
    )
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
    apply_threads(threads)
    from ..heads.run_folders.run_files import LayerWeights
    from ..heads.workflow import evaluate_run
    from ..report.heads import render_layer_weights, render_metrics

    result = evaluate_run(run, cache, split)
    if as_json:
        base.out_console.print_json(json.dumps(result, default=float))
        return
    render_metrics({split: result["metrics"]}, base.out_console, title=f"{run} on {result['cache']}",
                   primary=result["primary"])
    render_layer_weights(LayerWeights(layer_names=result["layer_names"], mixer_weights=result["layer_weights"],
                                      usage=result["usage"]), base.out_console)
