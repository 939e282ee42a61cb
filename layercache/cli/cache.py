"""Commands that write or describe caches: ``extract``, ``info`` and ``list``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError, LayercacheError
from ..extraction.specs import BatchSpec, DataSpec, StorageSpec
from . import base
from . import extraction_options as eo
from .base import app, friendly
from .options import allow_pickle_option, cache_argument, quiet_option, threads_option
from .spec_options import spec_options, takes_specs
from .threads import apply_threads


@app.command()
@friendly
@takes_specs("extract")
def extract(
    model: str = eo.model_argument(),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Cache folder.", show_default="under $LAYERCACHE_HOME"),
    data: DataSpec = spec_options(DataSpec),
    storage: StorageSpec = spec_options(StorageSpec),
    batching: BatchSpec = spec_options(BatchSpec),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete the cache in --out and extract afresh (whatever its configuration)."),
    repair: bool = typer.Option(
        False, "--repair", help="Re-read every shard and re-extract only those whose checksum fails (same arguments "
                                "as the run that made the cache)."),
    quality_sample: int = typer.Option(
        eo.QUALITY_EXAMPLES, "--quality-sample",
        help="A lossy storage (int8, int4, --project): examples of the first split its quality is measured on after "
             "the run, as `plan` measures it (probes and a quick head against float32 states; recorded in the "
             "manifest, shown by `info`). 0: not measured."),
    max_loss: Optional[float] = typer.Option(
        None, "--max-loss", help="Warn when the stored states lose more than this many points of any task's metric "
                                 "(95 % interval), naming a more faithful choice measured within it."),
    quality_seed: int = typer.Option(0, "--quality-seed", help="Seed of the quality sample and of its learners."),
    allow_pickle: bool = allow_pickle_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Run MODEL frozen over DATASET once and cache every layer's states (resumable; one writer per rank under
    torchrun)."""
    apply_threads(threads)
    from ..planning.checked import extract as run_extract

    result = run_extract(model, out=out, data=data, storage=storage, batching=batching, overwrite=overwrite,
                         repair=repair, allow_pickle=allow_pickle, progress=not quiet,
                         quality_examples=quality_sample, max_loss=max_loss, quality_seed=quality_seed)
    fixed = "; ".join([*([f"{len(result.repaired)} shard(s) re-extracted"] if result.repaired else []),
                       *([f"{', '.join(result.rewritten)} written again"] if result.rewritten else [])])
    if result.repaired or (result.already_complete and result.rewritten):
        verb = f"repaired ({fixed})"
    elif result.already_complete:
        verb = "checked, nothing to repair" if repair else "already complete"
    else:
        verb = ("resumed and completed" if result.resumed else "written") + (f" ({fixed})" if fixed else "")
    base.out_console.print(f"Cache {verb}: [bold]{result.path}[/]", soft_wrap=True)


@app.command()
@friendly
def info(
    cache: Optional[Path] = cache_argument(),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
    check: bool = typer.Option(False, "--check", help="Also re-read every shard and compare it with its "
                               "recorded checksum (exit code 1 when one differs)."),
):
    """Show what a cache holds: model, dataset, splits, sizes, layers, dtype, complete or not."""
    from ..report.info import cache_summary, render_summary
    from ..store.reader import LayerCache

    with LayerCache.open(cache, allow_incomplete=True) as opened:
        if as_json:
            base.out_console.print_json(json.dumps(opened.manifest.to_json()))
        else:
            render_summary(cache_summary(opened), base.out_console)
        if check:
            shards, side_files = opened.shard_problems(), opened.side_file_problems()
            if shards or side_files:
                base.err_console.print(_damage_text(shards, side_files), highlight=False, soft_wrap=True)
                raise typer.Exit(1)
            n = sum(len(s.shards) for s in opened.manifest.splits.values())
            sides = len(opened.manifest.side_files)
            also = f" and {sides} side file{'s' if sides > 1 else ''}" if sides else ""
            base.err_console.print(f"All {n} shards{also} match their checksums.")


def _damage_text(shards: dict[str, str], side_files: dict[str, str]) -> str:
    """What ``info --check`` found (each file with its problem) and the one command that fixes it."""
    counted = " and ".join(f"{len(found)} {noun}(s)" for found, noun in ((shards, "shard"), (side_files, "side file"))
                           if found)
    redo = " and ".join(what for found, what in ((shards, "re-extract only those shards"),
                                                (side_files, "write those side files again")) if found)
    return (f"[bold red]{counted} missing, unreadable or changed since extraction:[/] "
            + ", ".join(f"{file} ({problem})" for file, problem in {**shards, **side_files}.items())
            + f". Re-run the `layercache extract` command that made the cache with --repair to {redo}.")


@app.command("list")
@friendly
def list_caches(
    folder: Optional[Path] = typer.Argument(
        None, help="Folder whose caches to list (or one cache folder).", show_default="$LAYERCACHE_HOME"),
):
    """List the caches in FOLDER (default: $LAYERCACHE_HOME); a broken one is listed too, with what is wrong."""
    from ..report.tables import Column, print_fitted
    from ..store.paths import cache_home, latest_cache

    where = (folder or cache_home()).expanduser()
    try:
        latest = latest_cache()
    except LayercacheError as err:  # a damaged pointer only costs the mark
        latest = None
        base.err_console.print(f"Note: {err}", highlight=False, soft_wrap=True)
    if folder is not None and not where.is_dir():
        raise ConfigError(f"{where} is not a folder; give the folder that holds the caches, e.g. `layercache list "
                          "runs`.")
    if _looks_like_cache(where):
        found = [where]
    else:
        found = sorted(p for p in where.glob("*") if _looks_like_cache(p)) if where.is_dir() else []
    rows = []
    for cache in found:
        mark = "yes" if latest is not None and cache.resolve() == latest.resolve() else ""
        rows.append([mark, cache.name, *_cache_row(cache)])
    if rows:
        print_fitted(base.out_console, [Column("latest"), Column("cache", key=True), Column("model", wrap=True),
                                        Column("dataset", wrap=True), Column("splits", wrap=True),
                                        Column("status", wrap=True)], rows, title=f"Caches in {where}")
        return
    default = "" if folder is not None else " ($LAYERCACHE_HOME, where extract puts a cache without --out)"
    hint = (f"the most recent cache is {latest}: `layercache list {latest.parent}` lists its folder"
            if latest is not None and latest.parent.resolve() != where.resolve() else
            "caches extracted with --out elsewhere (make demo writes runs/demo-cache) are listed with "
            "`layercache list FOLDER`")
    base.out_console.print(f"No caches in {where}{default}; {hint}.", highlight=False, soft_wrap=True)


def _looks_like_cache(folder: Path) -> bool:
    """A manifest, or shards that lost theirs (a cache whose manifest was deleted is broken, not absent)."""
    return folder.is_dir() and ((folder / "manifest.json").exists() or any(folder.glob("*/shard-*.h5")))


def _cache_row(folder: Path) -> tuple[str, str, str, str]:
    """model, dataset, splits and status of one cache; status ``broken: <reason>`` when it cannot be used."""
    from ..store.manifest import read_manifest

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
    return m.model.name, m.dataset.name, ", ".join(m.splits), status


def _short_reason(err: Exception, folder: Path) -> str:
    """The problem half of an error sentence (before its fix), paths inside the cache made relative."""
    text = str(err).split("; ")[0].replace(f"{folder}{os.sep}", "").replace(str(folder), folder.name)
    return text if len(text) <= 100 else text[:97] + "..."
