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
