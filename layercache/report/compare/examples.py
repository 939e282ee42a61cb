"""The same examples in every cache: checked, and found row by row.

Caches of two models over one dataset hold the same examples in different orders: extraction writes the longest
examples first, and what is long depends on the tokenizer. Each cache records the source row of each of its rows
(``example_index``), so the examples line up by source row. :func:`shared_examples` checks, before any work, that
the caches were extracted from the same data, and refuses in one sentence naming what differs:

1. the same dataset (name and configuration, or else the same content fingerprint: a file read from another
   folder);
2. the same splits, with the same number of examples each;
3. the same source rows in each split (the same ``limit``, the same empty rows skipped);
4. the same labels on those rows, for every task the caches share (the same class names; for a token task the
   same words with the same labels), so that two local files of one name with other contents are told apart.

It returns, per cache and split, the cache row of each example in one shared order (by source row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...core.tasks import LabelTask
from ...errors import ConfigError
from ...store.reader import LayerCache

FIX = "compare caches extracted from the same dataset and splits"


@dataclass(frozen=True)
class SharedExamples:
    """The examples every cache holds, in one order (by source row), and where each cache holds them."""

    sizes: dict[str, int]
    """Split -> its number of examples."""
    source_rows: dict[str, np.ndarray]
    """Split -> (n,) the source rows, ascending: the shared order."""
    rows: list[dict[str, np.ndarray]]
    """Per cache, split -> (n,) its row of each example, in the shared order."""

    def cache_rows(self, cache: int, split: str, picked: np.ndarray | None = None) -> np.ndarray:
        """(k,) cache ``cache``'s rows of the examples at positions ``picked`` of the shared order (default all)."""
        rows = self.rows[cache][split]
        return rows if picked is None else rows[picked]


def shared_examples(caches: Sequence[LayerCache], labels: Sequence[str] | None = None) -> SharedExamples:
    """Check that ``caches`` (named ``labels`` in messages; default: their folders) hold the same examples (see the
    module); return where each holds them."""
    labels = [str(cache.path) for cache in caches] if labels is None else labels
    first, name = caches[0], labels[0]
    for cache, label in zip(caches[1:], labels[1:]):
        _same_dataset(first, name, cache, label)
        _same_splits(first, name, cache, label)
    sizes = {split: first.num_examples(split) for split in first.splits}
    source_rows, rows = {}, [dict[str, np.ndarray]() for _ in caches]
    for split in first.splits:
        indices = [np.asarray(cache.example_index(split), np.int64) for cache in caches]  # (n,) source row per row
        for k, order in enumerate(np.argsort(index, kind="stable") for index in indices):
            rows[k][split] = order  # the cache rows, by ascending source row
        source_rows[split] = indices[0][rows[0][split]]
        for k in range(1, len(caches)):
            if not np.array_equal(indices[k][rows[k][split]], source_rows[split]):
                raise ConfigError(f"{name} and {labels[k]} hold different examples of split {split!r} (as many, "
                                  f"from other source rows); {FIX}, with the same limit.")
    shared = SharedExamples(sizes, source_rows, rows)
    for k in range(1, len(caches)):
        _same_labels(caches, labels, shared, k)
    return shared


def _dataset_text(cache: LayerCache) -> str:
    data = cache.manifest.dataset
    files = ", ".join(f"{s}={f}" for s, f in (data.files or {}).items())
    return (data.name or files or "its files") + (f" ({data.config})" if data.config else "")


def _same_dataset(first: LayerCache, name: str, cache: LayerCache, label: str) -> None:
    a, b = first.manifest.dataset, cache.manifest.dataset
    if (a.name, a.config) != (b.name, b.config) and a.fingerprint != b.fingerprint:
        raise ConfigError(f"The caches are not over the same data: {name} was extracted from {_dataset_text(first)} "
                          f"and {label} from {_dataset_text(cache)}; {FIX}.")


def _same_splits(first: LayerCache, name: str, cache: LayerCache, label: str) -> None:
    if sorted(first.splits) != sorted(cache.splits):
        raise ConfigError(f"The caches are not over the same splits: {name} has {', '.join(first.splits)} and "
                          f"{label} has {', '.join(cache.splits)}; {FIX}.")
    for split in first.splits:
        n, m = first.num_examples(split), cache.num_examples(split)
        if n != m:
            raise ConfigError(f"The caches are not over the same examples: {name} holds {n:,} examples of split "
                              f"{split!r} and {label} holds {m:,}; {FIX}, with the same limit, and let each "
                              "extraction finish.")


def _same_labels(caches: Sequence[LayerCache], labels: Sequence[str], shared: SharedExamples, k: int) -> None:
    """Refuse cache ``k`` when a task it shares with the first cache names its classes or labels a row otherwise."""
    first, cache = caches[0], caches[k]
    theirs = {t.name: t for t in cache.tasks}
    for spec in first.tasks:
        other = theirs.get(spec.name)
        if other is None:
            continue
        if (spec.kind, spec.label_names) != (other.kind, other.label_names):
            raise ConfigError(f"{labels[0]} and {labels[k]} read task {spec.name!r} differently ({_kind(spec)} "
                              f"against {_kind(other)}); {FIX}, with the same label columns and task kinds.")
        for split in first.splits:
            if not _labels_equal(first, cache, spec, split, shared.rows[0][split], shared.rows[k][split]):
                raise ConfigError(f"{labels[0]} and {labels[k]} hold other labels of task {spec.name!r} on the same "
                                  f"rows of split {split!r}, so the data differ; {FIX}.")


def _kind(spec: LabelTask) -> str:
    names = "" if spec.label_names is None else f": {', '.join(spec.label_names)}"
    return f"{spec.kind}{names}"


def _labels_equal(a: LayerCache, b: LayerCache, spec: LabelTask, split: str, rows_a: np.ndarray,
                  rows_b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` give the same labels of ``spec`` to each example (rows in the shared order)."""
    labels_a, labels_b = a.labels(split, spec.name), b.labels(split, spec.name)
    if spec.kind != "token":
        return bool(np.array_equal(np.asarray(labels_a)[rows_a], np.asarray(labels_b)[rows_b], equal_nan=True))
    return all(np.array_equal(labels_a[i], labels_b[j]) for i, j in zip(rows_a, rows_b))
