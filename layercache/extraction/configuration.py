"""A run's configuration as its manifest records it: what is hashed, and what differs between two caches.

Two runs with the same configuration hash write the same cache, so one resumes the other; a
different hash into an existing cache is refused, naming the first part that differs.
"""

from __future__ import annotations

from ..core.checksum import json_sha256
from ..core.option_names import option
from ..core.version import __version__
from ..sources.records import DatasetRecords
from ..store.manifest import FORMAT_VERSION, Manifest, SplitInfo
from ..store.sections import DatasetSection, ExtractionSection, ModelSection, StorageSection, TokenizerSection
from ..store.storage import pooled_dtype_for
from .batching import PLANNER


def new_manifest(backbone, records: DatasetRecords, plans, *, keep, store, pooling, storage_dtype, stride,
                 batch_tokens, batch_size, shard_bytes, limit, mean_skip_first: bool = False,
                 dtype_choice: str | None = None, project: int | None = None,
                 project_basis: str = "pca", compression: str = "none") -> Manifest:
    """The manifest of a new cache: every option the run was given, and the hash of those that shape its states."""
    names = backbone.layer_names
    model = ModelSection.from_json(backbone.describe())
    tokenizer = TokenizerSection.from_json({**backbone.describe_tokenizer(), "stride": stride})
    dataset = DatasetSection(name=records.name, config=records.config, fingerprint=records.fingerprint,
                             columns=records.columns, text_columns=records.text_columns, limit=limit,
                             files=records.files)
    storage = StorageSection(dtype=storage_dtype, layers=keep, layer_names=[names[i] for i in keep],
                             all_layer_names=names, store=store, pooling=pooling, shard_bytes=shard_bytes,
                             final_norm=backbone.final_norm, mean_skip_first=mean_skip_first, project=project,
                             project_basis=project_basis if project else None,  # hashed unless pca
                             pooled_dtype=pooled_dtype_for(storage_dtype, store),  # float16 beside int8 tokens
                             compression=compression)  # recorded (and hashed) only when not none
    # storage_dtype_auto is not hashed: auto and the explicit dtype it resolved to are one configuration
    extraction = ExtractionSection(batch_tokens=batch_tokens, batch_size=batch_size, planner=PLANNER,
                                   device=str(backbone.device), forward_dtype=model.forward_dtype,
                                   storage_dtype_auto=dtype_choice)
    splits = {name: SplitInfo(n_examples=len(p.examples), n_tokens=p.n_tokens, n_batches=len(p.batches),
                              n_truncated=p.n_truncated, n_windowed=p.n_windowed,
                              n_skipped_empty=records.splits[name].n_skipped_empty) for name, p in plans.items()}
    # The same JSON the manifest holds, so the hash of a configuration never depends on the types above.
    content = {"format": FORMAT_VERSION, "model": model.fingerprint, "tokenizer": tokenizer.to_json(),
               "dataset": dataset.to_json(), "tasks": [t.to_json() for t in records.tasks], "splits": list(plans),
               "storage": storage.hashed(), "forward_dtype": model.forward_dtype,
               "batching": [batch_tokens, batch_size, PLANNER]}
    return Manifest(model=model, tokenizer=tokenizer, dataset=dataset, tasks=list(records.tasks), storage=storage,
                    extraction=extraction, splits=splits, config_hash=json_sha256(content, compact=True),
                    layercache_version=__version__)


def difference(old: Manifest, new: Manifest) -> str:
    """Name the first thing that differs between two caches' configurations, for the refusal."""
    # With one dtype, only an older layercache makes the pooled vectors' dtype differ (int8 before 1a00df1).
    pooled = [c.storage.stored_pooled_dtype if old.storage.dtype == new.storage.dtype else None for c in (old, new)]
    # Named only between two projected caches: a cache at full width differs by its project= first.
    basis = [c.storage.projection_basis if old.storage.project and new.storage.project else None for c in (old, new)]
    checks = [("model", old.model.fingerprint, new.model.fingerprint),
              ("tokenizer or max length", old.tokenizer.to_json(), new.tokenizer.to_json()),
              ("dataset", old.dataset.to_json(), new.dataset.to_json()),
              ("set of splits", list(old.splits), list(new.splits)),
              ("pooled-vector dtype (an int8 cache from a layercache that stored them int8; this one stores "
               "them float16)", *pooled),
              (f"projection basis ({option('project_basis')})", *basis),
              (f"compression ({option('compression')})", old.storage.stored_compression,
               new.storage.stored_compression),
              (f"storage (layers, dtype, store, pooling, {option('mean_skip_first')}, {option('project')} or "
               "shard size)",
               old.storage.hashed(), new.storage.hashed()),
              ("forward dtype", old.model.forward_dtype, new.model.forward_dtype),
              (f"batching ({option('batch_tokens')}, {option('batch_size')})",
               [old.extraction.batch_tokens, old.extraction.batch_size],
               [new.extraction.batch_tokens, new.extraction.batch_size]),
              ("batch planner (an older layercache)", old.extraction.planner, new.extraction.planner)]
    for what, a, b in checks:
        if a != b:
            return what
    return "configuration"
