"""``layercache predict``: trained runs on the live backbone, texts in, a table or JSON lines out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from . import base
from .base import app, friendly
from .threads import apply_threads, threads_option


@app.command("predict")
@friendly
def predict(
    args: list[str] = typer.Argument(
        ..., help="Run folders (written by train-head), then the texts to predict; the first argument that is not "
                  "a run folder starts the texts.", metavar="RUN [RUN ...] [TEXT ...]"),
    file: Optional[Path] = typer.Option(
        None, "--file", "-f", help="Texts to predict: one per line, or a .jsonl file with one object per line."),
    text_field: str = typer.Option("text", "--text-field", help="The field holding the text in a .jsonl file."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Write one JSON object per text to this file instead of printing a table."),
    backbone: Optional[str] = typer.Option(
        None, "--backbone", help="Backbone to load (hub id or folder).", show_default="the one the runs record"),
    batch_size: int = typer.Option(32, "--batch-size", help="Texts per forward pass (sorted by length)."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    threads: str = threads_option(),
):
    """Predict with trained runs on raw text: one backbone forward pass per batch serves every run."""
    apply_threads(threads)
    from ..live.inputs import read_inputs
    from ..live.predict import predict_texts, split_runs

    runs, texts = split_runs(args)
    if file is not None:
        texts = [*texts, *read_inputs(file, text_field)]
    show = file is not None and base.err_console.is_terminal
    result = predict_texts(runs, texts, backbone=backbone, device=device, batch_size=batch_size, progress=show)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            for row in result.rows():
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        base.out_console.print(f"Predictions written: [bold]{out}[/] ({len(result.texts)} texts)", soft_wrap=True)
        return
    render_predictions(result, base.out_console)


def render_predictions(result, console) -> None:
    """A table: each text, then each head's prediction (label and probability, tags, or value) per task."""
    from rich.table import Table

    table = Table(title="Predictions", show_lines=False)
    table.add_column("text", overflow="fold")
    columns = result.columns()
    for head, task in columns:
        table.add_column(head if head == task else f"{head}: {task}", overflow="fold")
    for row in result.rows():
        table.add_row(row["text"], *(_cell(row[head][task]) for head, task in columns))
    console.print(table)


def _cell(entry: dict) -> str:
    if "value" in entry:
        return f"{entry['value']:.3f}"
    if "tags" in entry:
        return " ".join(f"{w}/{t}" for w, t in zip(entry["words"], entry["tags"]))
    return f"{entry['label']} ({entry['probability']:.2f})"


@app.command("verify")
@friendly
def verify(
    cache: Optional[Path] = typer.Argument(None, help="Cache folder.", show_default="the most recent one"),
    sample: int = typer.Option(100, "--sample", "-n", help="Random cached examples to re-run, per split."),
    seed: int = typer.Option(0, "--seed", help="Seed that draws the examples."),
    split: Optional[str] = typer.Option(None, "--split", help="Check only this split.", show_default="every split"),
    run: Optional[Path] = typer.Option(
        None, "--run", help="Also compare this run's predictions from the cache with the live bundle's on the "
                            "sampled examples (agreement rate)."),
    dtype: Optional[str] = typer.Option(
        None, "--dtype", help="Forward dtype: float32, bfloat16 or float16.", show_default="the one extraction used"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    threads: str = threads_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Re-run the cache's backbone on sampled examples and compare with the stored states (exit 1 on a mismatch)."""
    apply_threads(threads)
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..errors import CacheMismatchError
    from ..live.verify import load_cache_backbone, verify_cache
    from ..store.reader import LayerCache

    bar = Progress(TextColumn("[bold]verifying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(file=sys.stderr), disable=quiet or as_json or not base.err_console.is_terminal,
                   transient=True)
    task = bar.add_task("verify", total=None)
    with LayerCache.open(cache) as handle:
        try:
            backbone = load_cache_backbone(handle, device=device, dtype=dtype)
        except CacheMismatchError as err:  # the cache is not its model's: a failed check, not a usage error
            base.err_console.print(f"[bold red]Verification failed:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_MISMATCH) from None
        with bar:
            result = verify_cache(handle, sample=sample, seed=seed, split=split, backbone=backbone,
                                  progress=lambda n: bar.advance(task, n),
                                  total=lambda n: bar.update(task, total=n))
        if run is not None:
            from ..live.parity import parity
            from ..live.verify import sample_rows

            name = split or next((s for s in ("test", handle.validation_split()) if s in handle.splits),
                                 handle.splits[-1])
            rows = sample_rows(handle, [name], sample, seed)[name]
            result.parity = parity(run, handle, name, rows=rows, backbone=backbone).to_json()
    if as_json:
        base.out_console.print_json(json.dumps(result.to_json(), default=float))
    else:
        render_verify(result, base.out_console)
    if not result.passed:
        base.err_console.print(f"[bold red]Verification failed:[/] {result.failure}", highlight=False,
                               soft_wrap=True)
        raise typer.Exit(EXIT_MISMATCH)


EXIT_MISMATCH = 1
"""``verify``'s exit code when the cache does not match its backbone (2 stays a usage error)."""


def render_verify(result, console) -> None:
    """A table per compared kind (token states, pooled vectors): each state's differences and verdict."""
    from rich.table import Table

    kinds = list(dict.fromkeys(r.what for r in result.rows))
    examples = ", ".join(f"{k} {v}" for k, v in result.examples.items())
    for what in kinds:
        table = Table(title=f"{what}: {result.model}, {result.storage_dtype} on disk, {result.forward_dtype} "
                            f"forward on {result.device} ({examples} examples)")
        for column in ("state", "max |diff|", "mean |diff|", "max / rms", "mean / rms", "worst / tolerance", ""):
            table.add_column(column, justify="left" if column == "state" else "right")
        for r in (r for r in result.rows if r.what == what):
            table.add_row(r.state, f"{r.max_abs:.3g}", f"{r.mean_abs:.3g}", f"{r.max_rel:.2e}", f"{r.mean_rel:.2e}",
                          f"{r.worst:.3g}", "[green]ok[/]" if r.passed else "[bold red]FAIL[/]")
        console.print(table)
    if result.parity is not None:
        p = result.parity
        console.print(f"Parity of {p['run']} on {p['split']} ({p['examples']} examples), cache vs live: "
                      + "; ".join(f"{name} {t['agreement']:.2%} ({t['agree']}/{t['compared']})" if "agreement" in t
                                  else f"{name} max |diff| {t['max_abs_diff']:.3g}"
                                  for name, t in p["tasks"].items()), soft_wrap=True)
    verdict = "[green]passed[/]" if result.passed else "[bold red]failed[/]"
    console.print(f"Verification {verdict} in {result.seconds:.1f} s.")
