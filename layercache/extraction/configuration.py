"""A run's configuration as its manifest records it: what is hashed, and what differs between two caches.

Two runs with the same configuration hash write the same cache, so one resumes the other; a
different hash into an existing cache is refused, naming the first part that differs.
"""

from __future__ import annotations

from ..core.version import __version__
from ..sources.records import DatasetRecords
from ..store.manifest import FORMAT_VERSION, Manifest, SplitInfo, stable_hash
from .batching import PLANNER


def hashed_storage(storage: dict) -> dict:
    """The storage section as the configuration hash sees it: ``mean_skip_first`` only when set, so caches
    written before the option existed keep their hash (absent means false)."""
    return {k: v for k, v in storage.items() if k != "mean_skip_first" or v}


def new_manifest(backbone, records: DatasetRecords, plans, *, keep, store, pooling, storage_dtype, stride,
                 batch_tokens, batch_size, shard_bytes, limit, mean_skip_first: bool = False,
                 dtype_choice: str | None = None) -> Manifest:
    """The manifest of a new cache: every option the run was given, and the hash of those that shape its states."""
    names = backbone.layer_names
    model = backbone.describe()
    tokenizer = {**backbone.describe_tokenizer(), "stride": stride}
    dataset = {"name": records.name, "config": records.config, "fingerprint": records.fingerprint,
               "columns": records.columns, "text_columns": records.text_columns, "limit": limit,
               "files": records.files}
    storage = {"dtype": storage_dtype, "layers": keep, "layer_names": [names[i] for i in keep],
               "all_layer_names": names, "store": store, "pooling": pooling, "shard_bytes": shard_bytes,
               "final_norm": backbone.final_norm, "mean_skip_first": mean_skip_first}
    extraction = {"batch_tokens": batch_tokens, "batch_size": batch_size, "planner": PLANNER,
                  "device": str(backbone.device),
                  "forward_dtype": model["forward_dtype"]}
    if dtype_choice is not None:  # not hashed: auto and the explicit dtype it resolved to are one configuration
        extraction["storage_dtype_auto"] = dtype_choice
    splits = {name: SplitInfo(n_examples=len(p.examples), n_tokens=p.n_tokens, n_batches=len(p.batches),
                              n_truncated=p.n_truncated, n_windowed=p.n_windowed,
                              n_skipped_empty=records.splits[name].n_skipped_empty) for name, p in plans.items()}
    content = {"format": FORMAT_VERSION, "model": model["fingerprint"], "tokenizer": tokenizer,
               "dataset": dataset, "tasks": [t.to_json() for t in records.tasks], "splits": list(plans),
               "storage": hashed_storage(storage), "forward_dtype": model["forward_dtype"],
               "batching": [batch_tokens, batch_size, PLANNER]}
    return Manifest(model=model, tokenizer=tokenizer, dataset=dataset, tasks=list(records.tasks), storage=storage,
                    extraction=extraction, splits=splits, config_hash=stable_hash(content),
                    layercache_version=__version__)


def difference(old: Manifest, new: Manifest) -> str:
    """Name the first thing that differs between two caches' configurations, for the refusal."""
    checks = [("model", old.model.get("fingerprint"), new.model.get("fingerprint")),
              ("tokenizer or max length", old.tokenizer, new.tokenizer),
              ("dataset", old.dataset, new.dataset),
              ("set of splits", list(old.splits), list(new.splits)),
              ("storage (layers, dtype, store, pooling, --mean-skip-first or shard size)",
               hashed_storage(old.storage), hashed_storage(new.storage)),
              ("forward dtype", old.model.get("forward_dtype"), new.model.get("forward_dtype")),
              ("batching (--batch-tokens, --batch-size)",
               [old.extraction.get("batch_tokens"), old.extraction.get("batch_size")],
               [new.extraction.get("batch_tokens"), new.extraction.get("batch_size")]),
              ("batch planner (an older layercache)", old.extraction.get("planner"), new.extraction.get("planner"))]
    for what, a, b in checks:
        if a != b:
            return what
    return "configuration"
