"""The ``layercache`` command line: parse options, make one library call, render the result.

Every user-caused problem arrives here as a :class:`~layercache.errors.LayercacheError` and is
printed as one sentence with exit code 2; no traceback for the user's own mistakes.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from .errors import ConfigError, LayercacheError

# Help texts are rendered as rich markup, where "[default: x]" reads as a tag and silently vanishes
# (leaving "Cache folder ."): a default that is not the parameter's value goes in show_default="...".
app = typer.Typer(
    help="Run a frozen transformer once, cache every layer's states, and learn from the cache.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
out_console = Console()
err_console = Console(stderr=True)
EXIT_USAGE = 2


def friendly(command):
    """Turn LayercacheError into one red sentence and exit code 2; Ctrl-C into a resume hint."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        _setup_logging()
        try:
            return command(*args, **kwargs)
        except LayercacheError as err:
            err_console.print(f"[bold red]Error:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt:
            err_console.print("Interrupted; committed shards are kept, run the same command again to resume.")
            raise typer.Exit(130) from None

    return wrapper


def _setup_logging() -> None:
    logger = logging.getLogger("layercache")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        logger.addHandler(RichHandler(console=err_console, show_time=False, show_path=False, markup=False))
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:  # the library's own weight-loading bars would clutter ours
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def parse_size(text: str) -> int:
    """``256MiB``, ``1.5GB``, ``4096`` -> bytes."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").lower() if match else None
    if not match or unit not in _UNITS:
        raise ConfigError(f"Size {text!r} is not understood; write e.g. 256MiB, 1GB or 4096.")
    return int(float(match.group(1)) * _UNITS[unit])


def split_list(values: list[str] | None) -> list[str]:
    """Options that take lists accept repeats and commas: ``--layers 0,3 --layers -1``."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def parse_splits(values: list[str] | None) -> tuple[list[str] | None, dict[str, str] | None]:
    """``--split train`` picks hub splits; ``--split train=path.tsv`` maps local files to splits."""
    names, files = [], {}
    for value in values or []:
        if "=" in value:
            name, path = value.split("=", 1)
            if not name or not path:
                raise ConfigError(f"--split {value!r} should look like NAME=PATH, e.g. train=data/train.tsv.")
            files[name] = path
        else:
            names.append(value)
    if names and files:
        raise ConfigError("--split takes either split names or NAME=PATH files, not both.")
    return names or None, files or None


@app.command()
@friendly
def extract(
    model: str = typer.Argument("minilm", help="Hub id, bundled alias (minilm) or local model folder."),
    dataset: Optional[str] = typer.Argument(None, help="builtin (default), a hub id, or a local csv/tsv/jsonl/parquet/CoNLL file."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Cache folder.", show_default="under $LAYERCACHE_HOME"),
    config: Optional[str] = typer.Option(None, "--config", help="Hub dataset config, e.g. cola for glue."),
    split: Optional[list[str]] = typer.Option(None, "--split", help="Split to extract (hub), or NAME=PATH for local files; repeatable."),
    text_column: Optional[list[str]] = typer.Option(None, "--text-column", help="Text column (twice for sentence pairs)."),
    label_column: Optional[list[str]] = typer.Option(None, "--label-column", help="Label column(s); detected when omitted."),
    no_labels: bool = typer.Option(False, "--no-labels", help="Cache states of unlabelled data."),
    task_kind: Optional[str] = typer.Option(None, "--task-kind", help="Override the label kind: sequence, token or regression."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Keep the first N examples of each split."),
    layers: Optional[list[str]] = typer.Option(None, "--layers", help="States to keep: names or indices (0 = embeddings, -1 = last); comma-separated."),
    store: str = typer.Option("tokens", "--store", help="tokens (all token states) or pooled (pooled vectors only)."),
    pooling: Optional[list[str]] = typer.Option(None, "--pooling", help="Pooled vectors to store: mean, first, last.", show_default="mean"),
    storage_dtype: str = typer.Option("auto", "--storage-dtype", help="On disk: auto (float16, or bfloat16 when the first batch's states exceed the float16 range), float16 (clamped to ±65,504), bfloat16 or float32."),
    mean_skip_first: bool = typer.Option(False, "--mean-skip-first", help="Leave each example's first token (a decoder's BOS / attention sink) out of mean pooling, here and in heads."),
    dtype: str = typer.Option("auto", "--dtype", help="Forward-pass dtype: auto, float32, float16, bfloat16."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Token limit per window.", show_default="the model's"),
    stride: Optional[int] = typer.Option(None, "--stride", help="Split long texts into windows overlapping by this many tokens instead of truncating."),
    batch_tokens: int = typer.Option(8192, "--batch-tokens", help="Padded tokens per forward batch."),
    batch_size: int = typer.Option(256, "--batch-size", help="Most sequences per forward batch."),
    shard_size: str = typer.Option("256MiB", "--shard-size", help="Target bytes of states per shard file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the cache in --out and extract afresh (whatever its configuration)."),
    repair: bool = typer.Option(False, "--repair", help="Re-read every shard and re-extract only those whose checksum fails (same arguments as the run that made the cache)."),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="Load a model that has only pickle weights (pytorch_model.bin), which can run code when loaded: only for a source you trust."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Run MODEL frozen over DATASET once and cache every layer's states (resumable)."""
    from .extraction.run import extract as run_extract
    from .extraction.specs import BatchSpec, DataSpec, StorageSpec

    splits, split_files = parse_splits(split)
    data = DataSpec(dataset or ("" if split_files else "builtin"), config=config, splits=splits,
                    split_files=split_files, text_columns=split_list(text_column) or None,
                    label_columns=split_list(label_column) or None, no_labels=no_labels, task_kind=task_kind,
                    limit=limit)
    storage = StorageSpec(layers=_layer_specs(split_list(layers)) or None, store=store,
                          pooling=split_list(pooling) or ["mean"], storage_dtype=storage_dtype,
                          mean_skip_first=mean_skip_first, shard_bytes=parse_size(shard_size))
    batching = BatchSpec(batch_tokens=batch_tokens, batch_size=batch_size, max_length=max_length, stride=stride,
                         dtype=dtype, device=device)
    result = run_extract(model, out=out, data=data, storage=storage, batching=batching, overwrite=overwrite,
                         repair=repair, allow_pickle=allow_pickle, progress=not quiet)
    if result.repaired:
        verb = f"repaired ({len(result.repaired)} shard(s) re-extracted)"
    elif result.already_complete:
        verb = "checked, nothing to repair" if repair else "already complete"
    else:
        verb = "resumed and completed" if result.resumed else "written"
    out_console.print(f"Cache {verb}: [bold]{result.path}[/]", soft_wrap=True)


@app.command()
@friendly
def info(
    cache: Optional[Path] = typer.Argument(None, help="Cache folder.", show_default="the most recent one"),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
    check: bool = typer.Option(False, "--check", help="Also re-read every shard and compare it with its "
                               "recorded checksum (exit code 1 when one differs)."),
):
    """Show what a cache holds: model, dataset, splits, sizes, layers, dtype, complete or not."""
    from .report.info import cache_summary, render_summary
    from .store.reader import LayerCache

    with LayerCache.open(cache, allow_incomplete=True) as opened:
        if as_json:
            out_console.print_json(json.dumps(opened.manifest.to_json()))
        else:
            render_summary(cache_summary(opened), out_console)
        if check:
            damaged = opened.damaged_shards()
            if damaged:
                err_console.print(f"[bold red]{len(damaged)} shard(s) missing or changed since extraction:[/] "
                                  + ", ".join(damaged) + ". Re-run the `layercache extract` command that made the "
                                  "cache with --repair to re-extract only those.", highlight=False, soft_wrap=True)
                raise typer.Exit(1)
            n = sum(len(s.shards) for s in opened.manifest.splits.values())
            err_console.print(f"All {n} shards match their checksums.")


@app.command("list")
@friendly
def list_caches():
    """List the caches under $LAYERCACHE_HOME; a broken one is listed too, with what is wrong."""
    from .store.paths import cache_home, latest_cache

    home = cache_home()
    try:
        latest = latest_cache()
    except LayercacheError as err:  # a damaged pointer only costs the mark
        latest = None
        err_console.print(f"Note: {err}", highlight=False, soft_wrap=True)
    table = Table("", "cache", "model", "dataset", "splits", "status", title=str(home))
    for folder in sorted(p for p in home.glob("*") if _looks_like_cache(p)):
        mark = "*" if latest is not None and folder.resolve() == latest.resolve() else ""
        table.add_row(mark, folder.name, *_cache_row(folder))
    out_console.print(table)


def _looks_like_cache(folder: Path) -> bool:
    """A manifest, or shards that lost theirs (a cache whose manifest was deleted is broken, not absent)."""
    return folder.is_dir() and ((folder / "manifest.json").exists() or any(folder.glob("*/shard-*.h5")))


def _cache_row(folder: Path) -> tuple[str, str, str, str]:
    """model, dataset, splits and status of one cache; status ``broken: <reason>`` when it cannot be used."""
    from .store.manifest import read_manifest

    try:
        m = read_manifest(folder)
    except LayercacheError as err:
        return "?", "?", "?", f"broken: {_short_reason(err, folder)}"
    status = "complete" if m.complete else "incomplete"
    for split in m.splits.values():
        for shard in split.shards:
            try:
                size = (folder / shard.file).stat().st_size
            except OSError:
                status = f"broken: shard {shard.file} is missing"
                break
            if size != shard.bytes:
                status = f"broken: shard {shard.file} changed size"
                break
        if status.startswith("broken"):
            break
    return (str(m.model.get("name", "?")), str(m.dataset.get("name", "?")), ", ".join(m.splits), status)


def _short_reason(err: Exception, folder: Path) -> str:
    """The problem half of an error sentence (before its fix), paths inside the cache made relative."""
    text = str(err).split("; ")[0].replace(f"{folder}{os.sep}", "").replace(str(folder), folder.name)
    return text if len(text) <= 100 else text[:97] + "..."


def parse_assignments(values: list[str] | None, what: str) -> dict:
    """``--mixer-option k=64 --mixer-option alpha=70`` -> ``{"k": 64, "alpha": 70.0}`` (JSON values)."""
    out = {}
    for value in values or []:
        key, sep, raw = value.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {value!r} should look like KEY=VALUE, e.g. k=64.")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw  # a bare word stays a string: pooling=attention
    return out


def _mixer_help() -> str:
    from .heads.mixers import mixer_names

    return ", ".join("layer:<i>" if n == "layer" else n for n in mixer_names())


@app.command("train-head")
@friendly
def train_head(
    cache: Optional[Path] = typer.Argument(None, help="Cache folder.", show_default="the most recent one"),
    mixer: str = typer.Option("adaptive", "--mixer", "-m", help=f"Layer mixer: {_mixer_help()}."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run folder.", show_default="a new folder beside the cache"),
    task: Optional[list[str]] = typer.Option(None, "--task", help="Task(s) to learn; repeatable.", show_default="every task in the cache"),
    layers: Optional[list[str]] = typer.Option(None, "--layers", help="States to read: names or indices; comma-separated.", show_default="all"),
    source: str = typer.Option("auto", "--source", help="tokens, pooled:<mode>, or auto (tokens when stored)."),
    normalize: str = typer.Option("auto", "--normalize", help="States before mixing: standardize (per dimension, train statistics), layer_norm (per token), none, or auto (standardize for pre-LN models such as GPT-2 and Llama, none for BERT-style)."),
    train_split: str = typer.Option("train", "--train-split", help="Split to train on."),
    val_split: Optional[str] = typer.Option(None, "--val-split", help="Validation split.", show_default="the cache's validation split, else a 10% slice of train"),
    test_split: Optional[str] = typer.Option(None, "--test-split", help="Split to report on.", show_default="test when present"),
    epochs: int = typer.Option(20, "--epochs", help="Most epochs (early stopping may end sooner)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Examples per minibatch."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Peak learning rate.", show_default="1e-3 for attention heads and adaptive, 1e-2 for linear heads"),
    weight_decay: float = typer.Option(0.01, "--weight-decay", help="AdamW weight decay (never on layer weights)."),
    schedule: str = typer.Option("linear", "--schedule", help="linear, cosine, constant or plateau."),
    patience: int = typer.Option(3, "--patience", help="Epochs without validation gain before stopping (0 = never)."),
    seed: int = typer.Option(0, "--seed", help="Seed for initialisation, order, dropout and the validation slice."),
    mixer_option: Optional[list[str]] = typer.Option(None, "--mixer-option", help="Mixer setting KEY=VALUE, e.g. k=64, alpha=70, topk=3; repeatable."),
    head_option: Optional[list[str]] = typer.Option(None, "--head-option", help="Head setting KEY=VALUE, e.g. pooling=attention, attention_heads=8; repeatable."),
    loss_weight: Optional[list[str]] = typer.Option(None, "--loss-weight", help="TASK=WEIGHT for joint training; repeatable."),
    separate_mixers: bool = typer.Option(False, "--separate-mixers", help="One mixer per task instead of one shared."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty run folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Learn a head on a cache (no backbone needed): prints metrics and layer weights, writes a run folder."""
    from .heads.evaluation import primary_metric
    from .heads.runs import train_head as run_train_head
    from .report.heads import render_layer_weights, render_metrics

    weights = parse_assignments(loss_weight, "--loss-weight")
    for name, value in weights.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"--loss-weight {name}={value!r} needs a number, e.g. {name}=0.5.")
    result = run_train_head(
        cache, mixer, out=out, split=train_split, val_split=val_split, test_split=test_split, overwrite=overwrite,
        tasks=split_list(task) or None, layers=_layer_specs(split_list(layers)) or None, source=source,
        normalize=normalize,
        mixer_options=parse_assignments(mixer_option, "--mixer-option"),
        head_options=parse_assignments(head_option, "--head-option"), share_mixer=not separate_mixers,
        loss_weights=weights or None, epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay,
        schedule=schedule, patience=patience, seed=seed, device=device, progress=not quiet,
    )
    m = result.metrics
    shown = {"validation": m["validation"]}
    if "test" in m:
        shown[m["test_split"]] = m["test"]
    history = m["history"]
    primary = {t.name: primary_metric(t) for t in result.head.tasks_}
    render_metrics(shown, out_console, primary=primary,
                   title=f"{mixer} (normalize {m['normalize']}): best epoch {history['best_epoch']} of "
                         f"{len(history['epochs'])}, "
                         f"{m['train_seconds']:.1f} s; validation = {m['data']['validation']}")
    render_layer_weights(result.layer_weights, out_console)
    out_console.print(f"Run written: [bold]{result.run}[/]", soft_wrap=True)


def _layer_specs(values: list[str]) -> list[int | str]:
    """``--layers`` values as layer specs: ``"-1"`` -> ``-1``, names stay names (see :mod:`layercache.core.layers`)."""
    from .core.layers import parse_layer_spec

    return [parse_layer_spec(v) for v in values]


@app.command("eval")
@friendly
def eval_run(
    run: Path = typer.Argument(..., help="Run folder written by train-head."),
    cache: Optional[Path] = typer.Argument(None, help="Cache folder.", show_default="the most recent one"),
    split: str = typer.Option("test", "--split", help="Split to score."),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as JSON."),
):
    """Score a saved run on a split of a cache (refuses a cache from another backbone)."""
    from .heads.runs import evaluate_run
    from .report.heads import render_layer_weights, render_metrics

    result = evaluate_run(run, cache, split)
    if as_json:
        out_console.print_json(json.dumps(result, default=float))
        return
    render_metrics({split: result["metrics"]}, out_console, title=f"{run} on {result['cache']}",
                   primary=result["primary"])
    render_layer_weights({"layer_names": result["layer_names"], "mixers": result["layer_weights"],
                          "usage": result["usage"]}, out_console)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
