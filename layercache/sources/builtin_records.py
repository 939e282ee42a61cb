"""The built-in task set as a data source: the seed from its name, then splits, tasks and a row limit.

The sentences themselves come from :mod:`layercache.sources.builtin`.
"""

from __future__ import annotations

from layercache.errors import ConfigError, DatasetError

from ..core.checksum import json_sha256
from .records import DatasetRecords, SplitRecords


def load_builtin_records(source: str, *, config, splits, text_columns, label_columns, no_labels, task_kind,
                         limit) -> DatasetRecords:
    """``builtin`` or ``builtin:<seed>`` with the options of :func:`~layercache.sources.datasets.load_dataset_records`.

    The generator is looked up when called (``layercache.sources.builtin.load_builtin``), so a
    test may replace it with smaller splits.
    """
    seed_text = source.partition(":")[2].strip()
    try:
        seed = int(seed_text) if seed_text else 0
    except ValueError:
        raise ConfigError(f"The built-in dataset takes an integer seed ('builtin:7'), not {seed_text!r}.") from None
    for option, value in (("config", config), ("text_columns", text_columns), ("task_kind", task_kind)):
        if value:
            raise ConfigError(f"{option} does not apply to the built-in dataset; leave it out.")
    from layercache.sources.builtin import load_builtin

    records = load_builtin(seed=seed)
    if splits is not None:
        unknown = [s for s in splits if s not in records.splits]
        if unknown:
            raise DatasetError(f"Split {unknown[0]!r} is not in the built-in dataset; choose from "
                               f"{', '.join(records.splits)}.")
        chosen = {s: records.splits[s] for s in splits}
    else:
        chosen = dict(records.splits)
    tasks = list(records.tasks)
    if no_labels:
        tasks = []
    elif label_columns:
        names = [t.name for t in tasks]
        missing = [c for c in label_columns if c not in names]
        if missing:
            raise DatasetError(f"The built-in dataset has no task {missing[0]!r}; its tasks are {', '.join(names)}.")
        tasks = [records.task(c) for c in label_columns]
    keep = [t.name for t in tasks]
    out = {}
    for name, split in chosen.items():
        stop = len(split) if limit is None else min(limit, len(split))
        out[name] = SplitRecords(
            texts=None if split.texts is None else split.texts[:stop],
            text_pairs=None if split.text_pairs is None else split.text_pairs[:stop],
            words=None if split.words is None else split.words[:stop],
            labels={k: split.labels[k][:stop] for k in keep if k in split.labels},
            source_index=list(split.source_index[:stop]) if split.source_index is not None else None,
        )
    fingerprint = json_sha256({"builtin": records.fingerprint, "seed": seed, "splits": list(out), "tasks": keep,
                         "limit": limit})
    return DatasetRecords(name=records.name or "builtin", splits=out, tasks=tasks, config=records.config,
                          fingerprint=fingerprint, columns=list(records.columns),
                          text_columns=list(records.text_columns))
