"""``plan``: what each way of storing a cache would cost, measured on this machine, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..core.extraction_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_DATASET,
    DEFAULT_FORWARD_DTYPE,
    DEFAULT_POOLING,
    DEFAULT_SHARD_BYTES,
    DEFAULT_STORE,
)
from ..store.codecs import AUTO
from . import base
from .base import app, friendly
from .choices import supported_files
from .options import allow_pickle_option, device_option, threads_option
from .parsing import layer_specs, parse_size, parse_splits, size_text, split_list
from .threads import apply_threads

SAMPLE_BATCHES = 3  # pricing.SAMPLE_BATCHES; not imported here, so `layercache --help` loads no extractor


@app.command()
@friendly
def plan(
    model: str = typer.Argument("minilm", help="Hub id, bundled alias (minilm) or local model folder."),
    dataset: Optional[str] = typer.Argument(
        None, help=f"{DEFAULT_DATASET} (default), a hub id, or a local file: {supported_files()}."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where the cache would go: free space and disk speed are measured there.",
        show_default="under $LAYERCACHE_HOME"),
    config: Optional[str] = typer.Option(None, "--config", help="Hub dataset config, e.g. cola for glue."),
    split: Optional[list[str]] = typer.Option(
        None, "--split", help="Split to plan (hub), or NAME=PATH for local files; repeatable."),
    text_column: Optional[list[str]] = typer.Option(
        None, "--text-column", help="Text column (twice for sentence pairs)."),
    label_column: Optional[list[str]] = typer.Option(
        None, "--label-column", help="Label column(s); detected when omitted."),
    no_labels: bool = typer.Option(False, "--no-labels", help="Plan a cache of unlabelled data."),
    task_kind: Optional[str] = typer.Option(None, "--task-kind", help="Override the label kind, as extract's."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Keep the first N examples of each split."),
    layers: Optional[list[str]] = typer.Option(
        None, "--layers", help="States to keep: names or indices (0 = embeddings, -1 = last); comma-separated."),
    store: str = typer.Option(DEFAULT_STORE, "--store", help="Your choice of what to keep, as extract's --store."),
    pooling: Optional[list[str]] = typer.Option(
        None, "--pooling", help="Pooled vectors to store, as extract's --pooling; comma-separated.",
        show_default=", ".join(DEFAULT_POOLING)),
    storage_dtype: str = typer.Option(AUTO, "--storage-dtype", help="Your choice of dtype on disk, as extract's."),
    project: Optional[int] = typer.Option(
        None, "--project", help="Your choice of projection width K: int8 + project K unless --storage-dtype names "
                                "another dtype (priced beside D/2, D/4, D/8)."),
    mean_skip_first: bool = typer.Option(
        False, "--mean-skip-first", help="Leave each example's first token out of mean pooling, as extract's."),
    dtype: str = typer.Option(DEFAULT_FORWARD_DTYPE, "--dtype", help="Forward-pass dtype, as extract's --dtype."),
    device: str = device_option(),
    max_length: Optional[int] = typer.Option(
        None, "--max-length", help="Token limit per window.", show_default="the model's"),
    stride: Optional[int] = typer.Option(
        None, "--stride", help="Split long texts into windows overlapping by this many tokens instead of truncating."),
    batch_tokens: int = typer.Option(DEFAULT_BATCH_TOKENS, "--batch-tokens", help="Padded tokens per forward batch."),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", help="Most sequences per forward batch."),
    shard_size: str = typer.Option(
        size_text(DEFAULT_SHARD_BYTES), "--shard-size", help="Target bytes of states per shard file."),
    disk_budget: Optional[str] = typer.Option(
        None, "--disk-budget", help="Judge what fits against this size (e.g. 80GiB) when it is below the free space."),
    sample_batches: int = typer.Option(
        SAMPLE_BATCHES, "--sample-batches", help="Planned batches to time the forward pass on (0: no forward, "
                                                 "timings not measured)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the plan as JSON to this file."),
    allow_pickle: bool = allow_pickle_option(),
    threads: str = threads_option(),
):
    """Price every way to store MODEL's states of DATASET (bytes, fits, times, when a cache pays); writes no cache."""
    apply_threads(threads)
    from ..extraction.pricing import plan_cache
    from ..extraction.specs import BatchSpec, DataSpec, StorageSpec

    splits, split_files = parse_splits(split)
    data = DataSpec(dataset or ("" if split_files else DEFAULT_DATASET), config=config, splits=splits,
                    split_files=split_files, text_columns=split_list(text_column) or None,
                    label_columns=split_list(label_column) or None, no_labels=no_labels, task_kind=task_kind,
                    limit=limit)
    storage = StorageSpec(layers=layer_specs(layers) or None, store=store,
                          pooling=split_list(pooling) or list(DEFAULT_POOLING), storage_dtype=storage_dtype,
                          mean_skip_first=mean_skip_first, shard_bytes=parse_size(shard_size))
    batching = BatchSpec(batch_tokens=batch_tokens, batch_size=batch_size, max_length=max_length, stride=stride,
                         dtype=dtype, device=device)
    budget = parse_size(disk_budget) if disk_budget is not None else None
    result = plan_cache(model, data, storage, batching, out=out, project=project, disk_budget=budget,
                        sample_batches=sample_batches, allow_pickle=allow_pickle)
    render_plan(result, base.out_console, dataset or "files")
    if json_path is not None:
        from ..core.files import write_text_atomic

        write_text_atomic(json_path, json.dumps(result.to_json(), indent=2) + "\n")
        base.err_console.print(f"Plan written: {json_path}", highlight=False, soft_wrap=True)


def render_plan(result, console, dataset: str) -> None:
    """The choices table, each choice's notes, the measured inputs and the recommendation."""
    from ..extraction.pricing import describe_measurements
    from ..extraction.storage_choices import HEADERS, choice_cells
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
    print_fitted(console, [Column("what", key=True), Column("value", wrap=True)],
                 describe_measurements(result), title="Measured")
    for note in result.notes:
        console.print(f"Note: {note}.", highlight=False, soft_wrap=True)
    console.print(f"[bold]{result.recommendation}[/]", highlight=False, soft_wrap=True)
