"""``plan``: what each way of storing a cache would cost, measured on this machine, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..extraction.specs import BatchSpec, DataSpec, StorageSpec
from . import base
from . import extraction_options as eo
from .base import app, friendly
from .options import allow_pickle_option, quiet_option, threads_option
from .parsing import parse_size
from .spec_options import spec_options, takes_specs
from .threads import apply_threads

SAMPLE_BATCHES = 3  # pricing.SAMPLE_BATCHES; not imported here, so `layercache --help` loads no extractor
HEAD_EPOCHS = 4  # planning.quality.HEAD_EPOCHS, not imported for the same reason


@app.command()
@friendly
@takes_specs("plan")
def plan(
    model: str = eo.model_argument(),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where the cache would go: free space and disk speed are measured there.",
        show_default="under $LAYERCACHE_HOME"),
    data: DataSpec = spec_options(DataSpec, no_labels={"help": "Plan a cache of unlabelled data."}),
    # --project is the plan's own (your choice of K, priced beside D/2, D/4, D/8); the basis and compression are
    # extract's (the plan prices each choice with the default basis, uncompressed)
    storage: StorageSpec = spec_options(
        StorageSpec, skip=("project", "project_basis", "compression"),
        store={"help": "Your choice of what to keep.", "after": ""},
        storage_dtype={"help": "Your choice of dtype on disk.", "after": ""}),
    project: Optional[int] = typer.Option(
        None, "--project", help="Your choice of projection width K: int8 + project K unless --storage-dtype names "
                                "another dtype (priced beside D/2, D/4, D/8)."),
    batching: BatchSpec = spec_options(BatchSpec),
    disk_budget: Optional[str] = typer.Option(
        None, "--disk-budget", help="Judge what fits against this size (e.g. 80GiB) when it is below the free space."),
    sample_batches: int = typer.Option(
        SAMPLE_BATCHES, "--sample-batches", help="Planned batches to time the forward pass on (0: no forward, "
                                                 "timings not measured)."),
    quality_sample: int = typer.Option(
        eo.QUALITY_EXAMPLES, "--quality-sample",
        help="Examples of the first split the quality check learns on (stratified, seeded; scored on a validation "
             "or test split when there is one, else on a held-out 30 %): per-state probes and a quick default head "
             "on every choice against float32. 0: quality not measured."),
    max_loss: Optional[float] = typer.Option(
        None, "--max-loss", help="Recommend the smallest choice that fits, pays and loses at most this many points "
                                 "of any task's metric (100 x accuracy, MCC, F1, r) with 95 % confidence.",
        show_default="the most faithful choice that fits and pays"),
    head_epochs: int = typer.Option(HEAD_EPOCHS, "--head-epochs", help="Epochs of the quality check's quick head."),
    seed: int = typer.Option(0, "--seed", help="Seed of the quality sample and of its learners."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the plan as JSON to this file."),
    allow_pickle: bool = allow_pickle_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Price every way to store MODEL's states of DATASET (bytes, fits, times, when a cache pays, and what each costs in
    quality on your labels); writes no cache."""
    apply_threads(threads)
    from ..planning.plan import plan_cache

    budget = parse_size(disk_budget) if disk_budget is not None else None
    result = plan_cache(model, data, storage, batching, out=out, project=project, disk_budget=budget,
                        sample_batches=sample_batches, allow_pickle=allow_pickle, progress=not quiet,
                        quality_examples=quality_sample, max_loss=max_loss, seed=seed,
                        head_epochs=head_epochs)
    render_plan(result, base.out_console, data.dataset or "files")
    if json_path is not None:
        from ..core.files import write_text_atomic

        write_text_atomic(json_path, json.dumps(result.to_json(), indent=2) + "\n")
        base.err_console.print(f"Plan written: {json_path}", highlight=False, soft_wrap=True)


def render_plan(result, console, dataset: str) -> None:
    """The choices table, each choice's notes, the measured inputs and the recommendation."""
    from ..extraction.storage_choices import HEADERS, choice_cells
    from ..planning.plan import describe_measurements
    from ..report.tables import Column, print_fitted

    columns = [Column(HEADERS[0], key=True)] + [Column(h, justify="right") for h in HEADERS[1:-1]] + \
        [Column(HEADERS[-1], wrap=True, min_width=20)]
    rows = [choice_cells(row) for row in result.rows]
    for row, cells in zip(result.rows, rows):
        if row.name == result.recommended:
            cells[0] = f"[bold green]{cells[0]}[/]"
    print_fitted(console, columns, rows, title=f"Storage choices: {result.model} on {dataset}",
                 caption="* your choice; bold: recommended; epoch read is cold, from disk")
    for row in result.rows:
        for note in row.notes:
            console.print(f"  {row.name}: {note}", highlight=False, soft_wrap=True, style="dim")
    if result.quality is not None:
        render_quality(result, console)
    print_fitted(console, [Column("what", key=True), Column("value", wrap=True)],
                 describe_measurements(result), title="Measured")
    for note in result.notes:
        console.print(f"Note: {note}.", highlight=False, soft_wrap=True)
    console.print(f"[bold]{result.recommendation}[/]", highlight=False, soft_wrap=True)


def render_quality(result, console) -> None:
    """Each measured choice's loss against float32, in points: its probes' and its quick head's, for the task
    where it loses most, with the 95 % interval."""
    from ..report.tables import Column, print_fitted

    def cell(costs: dict) -> str:
        if not costs:
            return "-"
        task, cost = max(costs.items(), key=lambda item: item[1].high)
        return f"{cost.loss:+.1f} [{cost.low:+.1f}, {cost.high:+.1f}] {task}"

    rows = []
    for quality in result.quality.choices:
        name = quality.name + (" *" if any(r.yours and r.name == quality.name for r in result.rows) else "")
        if quality.name == result.recommended:
            name = f"[bold green]{name}[/]"
        rows.append([name, cell(quality.probes), cell(quality.head)])
    print_fitted(console, [Column("choice", key=True), Column("probes: loss [95 %] worst task", wrap=True),
                           Column("quick head: loss [95 %] worst task", wrap=True)], rows,
                 title="Quality on your labels: points lost against float32 (+ is worse)",
                 caption=f"{result.quality.sample}; the quick head is measured for your choice and the recommended "
                         "one where they are lossy (int8, int4, a projection, pooled; with --max-loss, the candidates "
                         "tried); its interval also holds what a second training seed moves it")
    for quality in result.quality.choices:
        for note in quality.notes:
            console.print(f"  {quality.name}: {note}", highlight=False, soft_wrap=True, style="dim")
