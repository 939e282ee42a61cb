"""A human summary of a cache (what ``layercache info`` prints), as data first and text second."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.option_names import option, options
from ..core.units import human_bytes
from ..store.quality_record import describe_quality
from ..store.reader import LayerCache
from .tables import Column, print_fitted


def cache_summary(cache: LayerCache) -> dict:
    """The facts a user checks before trusting a cache, as a plain dict (also used by reports)."""
    m = cache.manifest
    splits = {}
    for name, s in cache.committed.splits.items():  # an unfinished cache: what its writers committed
        splits[name] = {"examples": s.n_examples, "written": s.rows_written, "tokens": s.n_tokens,
                        "truncated": s.n_truncated, "skipped_empty": s.n_skipped_empty, "windowed": s.n_windowed,
                        "shards": len(s.shards),
                        "bytes": s.bytes_written, "complete": s.complete}
    return {
        "path": str(cache.path), "complete": m.complete, "format_version": m.format_version,
        "model": m.model.to_json(), "tokenizer": m.tokenizer.to_json(), "dataset": m.dataset.to_json(),
        "tasks": [t.to_json() for t in m.tasks], "storage": m.storage.to_json(), "splits": splits,
        "total_bytes": sum(s["bytes"] for s in splits.values()),
        "fp16_overflow": m.extraction.overflow,
        "storage_dtype_auto": m.extraction.storage_dtype_auto,
        "projection": None if not m.storage.project else {
            "dim": m.storage.project, "width": m.model.hidden_size, "tokens": m.extraction.projection_tokens,
            "basis": m.storage.projection_basis,
            "variance_kept": dict(zip(m.layer_names, m.extraction.projection_variance or []))},
        "quality": m.extraction.quality,
        "created_at": m.created_at, "updated_at": m.updated_at,
    }


def render_summary(summary: dict, console: Console) -> None:
    """Print a :func:`cache_summary` to ``console``: a key/value header, then one table row per split."""
    model, tok, data, storage = summary["model"], summary["tokenizer"], summary["dataset"], summary["storage"]
    status = ("[green]complete[/]" if summary["complete"]
              else "[yellow]incomplete: re-run the same extract command to resume[/]")
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column(overflow="fold")  # paths whole (wrapped), never cut short with an ellipsis
    norm = {"none": "no final norm", "applied": "layer_L is after the final norm",
            "not-applied": "layer_L is before the final norm"}.get(storage.get("final_norm"), "?")
    rows = [
        ("cache", summary["path"]), ("status", status),
        ("model", f"{model['name']} ({model['kind']}, {model['architecture']}, {model['n_layers']} layers, "
                  f"hidden {model['hidden_size']}; {norm})"),
        ("revision", str(model.get("revision") or "local")),
        ("tokenizer", f"{tok['class']}, max length {tok['max_length']}"
                      + (f", windows with stride {tok['stride']}" if tok.get("stride") else ", truncating")),
        ("dataset", data["name"] + (f" / {data['config']}" if data.get("config") else "")
                    + f" (text: {', '.join(data['text_columns'])})"),
        *([("files", "; ".join(f"{split}: {path}" for split, path in data["files"].items()))]
          if len(data.get("files") or {}) > 1 else []),
        ("tasks", "; ".join(f"{t['name']} ({t['kind']}"
                            + (f", {len(t['label_names'])} classes)" if t["label_names"] else ")")
                            for t in summary["tasks"]) or "none (unlabelled)"),
        ("storage", f"{storage['store']}, {storage['dtype']}"
                    + (f" ({summary['storage_dtype_auto']})" if summary.get("storage_dtype_auto") else "")
                    + f", pooled: {', '.join(storage['pooling']) or 'none'}"
                    + (f" ({storage['pooled_dtype']})" if storage.get("pooled_dtype") and storage["pooling"] else "")
                    + ("; mean pooling skips each example's first token" if storage.get("mean_skip_first") else "")
                    + (f"; compressed losslessly ({storage['compression']})" if storage.get("compression") else "")),
        ("layers", ", ".join(storage["layer_names"])),
        *([("projection", _projection_text(summary["projection"]))] if summary.get("projection") else []),
        ("forward", f"{model['forward_dtype']} on {model['device']}"
                    + (f", split by {option('device_map')} ({_placement_text(model['placement'])})"
                       if model.get("placement") else "")),
        ("size", human_bytes(summary["total_bytes"])),
        *([("quality", f"{describe_quality(summary['quality'])} against float32 states, on "
                       f"{summary['quality']['sample']}")] if summary.get("quality") else []),
    ]
    if summary["fp16_overflow"]:
        fix = options(storage_dtype="bfloat16", overwrite=True)
        rows.append(("warning", f"[red]{summary['fp16_overflow']:,} values exceeded the float16 range and were "
                                f"clamped to ±65,504; re-extract with {fix}[/]"))
    for key, value in rows:
        head.add_row(key, value)
    console.print(head)
    _render_splits(summary["splits"], console)


def _placement_text(placement: dict[str, int]) -> str:
    """``3 modules on cuda:0, 2 on disk``: where a split model's modules were."""
    parts = [f"{count} on {device}" for device, count in placement.items()]
    return f"{parts[0].replace(' on ', ' modules on ', 1)}{''.join(', ' + p for p in parts[1:])}" if parts else ""


def _projection_text(projection: dict) -> str:
    """``each state stored as 96 of 384 principal coordinates (pca), ...; variance kept: embeddings 89.7%, ...``.

    A ``standardized`` basis keeps a fraction of the standardised variance (each dimension scaled to unit variance
    first), which the line says: it is not the fraction of the model's variance."""
    kept = ", ".join(f"{name} {value:.1%}" for name, value in projection["variance_kept"].items())
    standardized = projection.get("basis") == "standardized"
    kind = "standardized: PCA of the states scaled to unit variance per dimension" if standardized else "pca"
    return (f"each state stored as {projection['dim']} of {projection['width']} principal coordinates ({kind}), "
            f"fitted on {projection['tokens'] or '?':,} tokens; {'standardised ' if standardized else ''}variance "
            f"kept: {kept or 'not recorded'}")


SPLIT_COLUMNS = (  # header, summary key, justify; the counts that are zero in every split are left out
    ("split", None, "left"), ("examples", None, "right"), ("tokens", "tokens", "right"),
    ("truncated", "truncated", "right"), ("skipped", "skipped_empty", "right"), ("windowed", "windowed", "right"),
    ("shards", "shards", "right"), ("size", None, "right"), ("complete", None, "left"),
)
OPTIONAL_COUNTS = {"truncated": "truncated", "skipped": "skipped (empty text)", "windowed": "windowed"}


def _render_splits(splits: dict, console: Console) -> None:
    """One row per split; a count column that is 0 in every split becomes a line under the table instead."""
    # "skipped": source rows left out because their text was empty (they have no states to cache).
    shown, zero = [], []
    for header, key, justify in SPLIT_COLUMNS:
        if header in OPTIONAL_COUNTS and not any(s[key] for s in splits.values()):
            zero.append(OPTIONAL_COUNTS[header])
            continue
        shown.append((header, key, justify))
    rows = []
    for name, s in splits.items():
        cells = {"split": name, "size": human_bytes(s["bytes"]), "complete": "yes" if s["complete"] else "no",
                 "examples": f"{s['written']:,}" if s["written"] == s["examples"]
                             else f"{s['written']:,}/{s['examples']:,}",
                 "shards": str(s["shards"])}
        rows.append([cells.get(header) or f"{s[key]:,}" for header, key, _ in shown])
    print_fitted(console, [Column(h, justify=j, key=h == "split") for h, _, j in shown], rows)
    if zero:
        console.print(f"No example {_join(zero)} in any split.", style="dim")


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
