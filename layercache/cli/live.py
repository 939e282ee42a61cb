"""``layercache predict``: trained runs on the live backbone, texts in, a table or JSON lines out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperCommand

from . import base
from .base import app, friendly
from .choices import choice_help
from .options import (
    allow_pickle_option,
    cache_argument,
    check_before_loading,
    device_map_option,
    device_option,
    max_memory_option,
    quiet_option,
    threads_option,
)
from .parsing import parse_max_memory
from .threads import apply_threads


class _TextsAfterDashes(TyperCommand):
    """A command that counts the arguments after ``--``: ``predict`` takes them as texts, whatever they look like."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        """Count the arguments after the first ``--``, then parse as usual."""
        ctx.meta[LITERAL_KEY] = len(args) - args.index("--") - 1 if "--" in args else 0
        return super().parse_args(ctx, args)


LITERAL_KEY = "layercache.literal_texts"


@app.command("predict", cls=_TextsAfterDashes)
@friendly
def predict(
    ctx: typer.Context,
    args: list[str] = typer.Argument(
        ..., help="Run folders (written by train-head), then the texts to predict. The first argument that is not a "
                  "run folder starts the texts; an argument that looks like a path (it contains / or names something "
                  "on disk) and is not a run folder is refused: pass such a text with --text or after --.",
        metavar="RUN [RUN ...] [TEXT ...]"),
    text: Optional[list[str]] = typer.Option(
        None, "--text", "-t", help="A text to predict, taken literally (even one that looks like a path); "
                                   "repeatable. Texts come in the order: arguments, --text, --file."),
    file: Optional[Path] = typer.Option(
        None, "--file", "-f", help="Texts to predict: one per line, or a .jsonl file with one object per line "
                                   "(with --out, each object's other fields, such as id, are kept beside its "
                                   "prediction; a field named text or like a run is refused)."),
    text_field: str = typer.Option("text", "--text-field", help="The field holding the text in a .jsonl file."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Write one JSON object per text to this file instead of printing a table "
                                  "(written whole at the end; never the input file, a link, a FIFO, nor anywhere "
                                  "in the folder of a run, its cache or the backbone)."),
    backbone: Optional[str] = typer.Option(
        None, "--backbone", help="Backbone to load (hub id or folder).", show_default="the one the runs record"),
    batch_size: int = typer.Option(32, "--batch-size", help="Texts per forward pass (sorted by length)."),
    device: str = device_option(),
    device_map: Optional[str] = device_map_option(),
    max_memory: Optional[list[str]] = max_memory_option(),
    allow_pickle: bool = allow_pickle_option(),
    threads: str = threads_option(),
):
    """Predict with trained runs on raw text: one backbone forward pass per batch serves every run."""
    apply_threads(threads)
    from ..live.predict import predict_texts, split_runs

    limits = parse_max_memory(max_memory, device_map)
    runs, texts = split_runs(args, literal=ctx.meta.get(LITERAL_KEY, 0))
    result = predict_texts(runs, [*texts, *(text or [])], file=file, text_field=text_field, out=out,
                           backbone=backbone, device=device, batch_size=batch_size, allow_pickle=allow_pickle,
                           progress=file is not None, device_map=device_map, max_memory=limits)
    if out is not None:
        base.out_console.print(f"Predictions written: [bold]{out}[/] ({len(result.texts)} texts)", soft_wrap=True)
        return
    render_predictions(result, base.out_console)


def render_predictions(result, console) -> None:
    """A table: each text, then each head's prediction (label and probability, tags, or value) per task.

    At the console's width (:func:`~layercache.report.tables.print_fitted`): texts and tags wrap, labels
    and scores stay whole, and many heads split the table into parts that repeat the text.
    """
    from ..report.tables import Column, print_fitted

    columns = result.columns()
    header = [Column("text", key=True, wrap=True, min_width=24)]
    for head, task in columns:
        token = any(p.task.kind == "token" for h in result.heads if h.name == head for p in h.tasks.values())
        header.append(Column(head if head == task else f"{head}: {task}", wrap=token))
    rows = [[row["text"], *(_cell(row[head][task]) for head, task in columns)] for row in result.rows()]
    print_fitted(console, header, rows, title="Predictions")


def _cell(entry: dict) -> str:
    if "value" in entry:
        return f"{entry['value']:.3f}"
    if "tags" in entry:
        return " ".join(f"{w}/{t}" for w, t in zip(entry["words"], entry["tags"]))
    return f"{entry['label']} ({entry['probability']:.2f})"


@app.command("verify")
@friendly
def verify(
    cache: Optional[Path] = cache_argument(),
    sample: int = typer.Option(100, "--sample", "-n", help="Random cached examples to re-run, per split."),
    seed: int = typer.Option(0, "--seed", help="Seed that draws the examples."),
    split: Optional[str] = typer.Option(None, "--split", help="Check only this split.", show_default="every split"),
    run: Optional[Path] = typer.Option(
        None, "--run", help="Also compare this run's predictions from the cache with the live bundle's on the "
                            "sampled examples (agreement rate)."),
    dtype: Optional[str] = typer.Option(
        None, "--dtype", help=choice_help("verify", "--dtype", "Forward dtype."),
        show_default="the one extraction used"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    device: str = device_option(),
    device_map: Optional[str] = device_map_option(),
    max_memory: Optional[list[str]] = max_memory_option(),
    allow_pickle: bool = allow_pickle_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Re-run the cache's backbone on sampled examples and compare with the stored states (exit 1 on a mismatch)."""
    limits = parse_max_memory(max_memory, device_map)
    check_before_loading(cache, threads)
    apply_threads(threads)
    from ..errors import CacheMismatchError
    from ..live.verify import load_cache_backbone, verify_cache
    from ..progress import counting_progress
    from ..store.reader import LayerCache

    with LayerCache.open(cache) as handle:
        try:
            backbone = load_cache_backbone(handle, device=device, dtype=dtype, allow_pickle=allow_pickle,
                                           device_map=device_map, max_memory=limits)
        except CacheMismatchError as err:  # the cache is not its model's: a failed check, not a usage error
            base.err_console.print(f"[bold red]Verification failed:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_MISMATCH) from None
        with counting_progress("verifying", not (quiet or as_json)) as (advance, set_total):
            result = verify_cache(handle, sample=sample, seed=seed, split=split, backbone=backbone,
                                  progress=advance, total=set_total)
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
    """A table per compared kind (token states, pooled vectors): each state's differences and verdict.

    Then the values clamped to the float16 range, the run's parity (``--run``) and the verdict.
    """
    from ..report.tables import Column, print_fitted

    kinds = list(dict.fromkeys(r.what for r in result.rows))
    examples = ", ".join(f"{k} {v}" for k, v in result.examples.items())
    clamps = any(r.clamped for r in result.rows)
    columns = [Column("state", key=True), *(Column(c, justify="right") for c in (
        "max |diff|", "mean |diff|", "max / rms", "mean / rms", "worst / tolerance", *(["clamped"] if clamps else []),
        "verdict"))]
    for what in kinds:
        rows = [[r.state, f"{r.max_abs:.3g}", f"{r.mean_abs:.3g}", f"{r.max_rel:.2e}", f"{r.mean_rel:.2e}",
                 f"{r.worst:.3g}", *([f"{r.clamped:,}"] if clamps else []),
                 "[green]ok[/]" if r.passed else "[bold red]FAIL[/]"] for r in result.rows if r.what == what]
        print_fitted(console, columns, rows, title=f"{what}: {result.model}, {result.storage_dtype} on disk, "
                                                   f"{result.forward_dtype} forward on {result.device} ({examples} "
                                                   "examples)")
    clamping = result.clamping()
    if clamping:
        console.print(clamping, style="yellow" if result.clamped else None, soft_wrap=True)
    if result.parity is not None:
        p = result.parity
        console.print(f"Parity of {p['run']} on {p['split']} ({p['examples']} examples), cache vs live: "
                      + "; ".join(f"{name} {t['agreement']:.2%} ({t['agree']}/{t['compared']})" if "agreement" in t
                                  else f"{name} max |diff| {t['max_abs_diff']:.3g}"
                                  for name, t in p["tasks"].items()), soft_wrap=True)
    verdict = "[green]passed[/]" if result.passed else "[bold red]failed[/]"
    console.print(f"Verification {verdict} in {result.seconds:.1f} s.")
