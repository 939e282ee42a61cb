"""Hugging Face datasets as a source: a hub id, or a folder written by ``datasets.save_to_disk``.

Each split stays a lazy :class:`HubSplit`: columns are fetched when column detection or record
building asks for them, and ClassLabel features give label names and ids as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from layercache.errors import DatasetError

from ..core.checksum import json_sha256
from ..core.hub_access import OFFLINE_TIP, cache_only, hub_unreachable
from .messages import numbered, short_reason
from .registry import SUPPORTED_FORMATS
from .splits import LoadedSource, Split


class HubSplit(Split):
    """A split of a Hugging Face dataset, read column by column (and kept once read whole)."""

    def __init__(self, name: str, origin: str, dataset: Any) -> None:
        self.name, self.origin = name, origin
        self.dataset = dataset.with_format(None) if hasattr(dataset, "with_format") else dataset
        self.column_names = list(dataset.column_names)
        self.num_rows = len(dataset)
        self.class_names = _feature_class_names(getattr(dataset, "features", None) or {})
        self._cache: dict[str, list] = {}

    def column(self, name: str, stop: int | None = None) -> list:
        """The values of column ``name``, of the first ``stop`` rows (all rows when ``None``)."""
        full = self._cache.get(name)
        if full is not None:
            return full if stop is None else full[:stop]
        n = self.num_rows if stop is None else min(stop, self.num_rows)
        values = list(self.dataset.select_columns([name])[:n][name])
        if n == self.num_rows:
            self._cache[name] = values
        return values

    def where(self, rows: list[int]) -> str:
        """Name the split and these (0-based) rows for a message."""
        return f"{self.origin} ({numbered('row', rows)})"


def _feature_class_names(features: Mapping[str, Any]) -> dict[str, tuple[tuple[str, ...], bool]]:
    """ClassLabel names per column from hub features (``Sequence``/``List`` of ClassLabel: per word)."""
    try:
        from datasets import ClassLabel
    except ImportError:  # pragma: no cover - datasets is a dependency
        return {}
    hints: dict[str, tuple[tuple[str, ...], bool]] = {}
    for column, feature in features.items():
        if isinstance(feature, ClassLabel):
            hints[column] = (tuple(feature.names), False)
            continue
        inner = getattr(feature, "feature", None)
        if inner is None and isinstance(feature, list) and len(feature) == 1:
            inner = feature[0]
        if isinstance(inner, ClassLabel):
            hints[column] = (tuple(inner.names), True)
    return hints


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder written by ``datasets.save_to_disk`` (a DatasetDict or one Dataset)."""
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file())


def load_saved(path: Path, source: str) -> LoadedSource:
    """A folder written by ``datasets.save_to_disk``, named ``source``."""
    import datasets as hf_datasets

    try:
        data = hf_datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DatasetError(f"Could not load the saved dataset folder {source} ({short_reason(exc)}); check that it "
                           f"was written by datasets.save_to_disk and is complete.") from exc
    return _from_hf(data, name=source, config=None)


def load_hub(source: str, config: str | None) -> LoadedSource:
    """A dataset from the Hugging Face Hub (or whatever ``datasets.load_dataset`` resolves ``source`` to).

    When the hub cannot be reached (:func:`~layercache.core.hub_access.hub_unreachable`, asked unless
    ``HF_HUB_OFFLINE`` is set or ``source`` is a folder), only the local cache is read, with no retries.
    """
    import datasets as hf_datasets

    unreachable = None if Path(source).expanduser().is_dir() or hf_datasets.config.HF_HUB_OFFLINE else \
        hub_unreachable(hf_datasets.config.HF_ENDPOINT)
    try:
        with cache_only(unreachable is not None):
            data = hf_datasets.load_dataset(source, config)
    except Exception as exc:
        if unreachable:
            raise DatasetError(f"Could not load dataset {source!r}: the Hugging Face Hub cannot be reached "
                               f"({unreachable}) and the local Hugging Face cache does not hold it; pass a local "
                               f"file ({SUPPORTED_FORMATS}) or the builtin data, {OFFLINE_TIP}.") from exc
        raise DatasetError(f"Could not load dataset {source!r} from the Hugging Face Hub or a local path: "
                           f"{short_reason(exc)}. Check the name, or pass a local file ({SUPPORTED_FORMATS}).") \
            from exc
    return _from_hf(data, name=source, config=config)


def _from_hf(data: Any, name: str, config: str | None) -> LoadedSource:
    if isinstance(getattr(data, "column_names", None), list):  # a single Dataset
        items = [("train", data)]
    else:  # a DatasetDict
        items = list(data.items())
    splits: dict[str, Split] = {}
    parts: list[Any] = []
    for split_name, ds in items:
        if not hasattr(ds, "column_names") or not hasattr(ds, "__len__"):
            raise DatasetError(f"Split '{split_name}' of {name!r} is not a regular (non-streaming) dataset; "
                               f"load it without streaming.")
        split_name = str(split_name)
        splits[split_name] = HubSplit(split_name, f"split '{split_name}' of '{name}'", ds)
        fingerprint = getattr(ds, "_fingerprint", None) or json_sha256([name, config, split_name, len(ds)])
        parts.append({"split": split_name, "fingerprint": fingerprint})
    return LoadedSource(name=name, splits=splits, fingerprint_parts=parts, config=config)
