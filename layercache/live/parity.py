"""``parity``: do a run's predictions from the cache equal its predictions through the live bundle?

    report = parity("runs/sentiment", "runs/demo-cache", "test")
    report.agreement                   # labels that agree / labels compared (min over tasks)
    report.tasks["intensity"]          # regression: {"max_abs_diff": ...}

The cache side is :meth:`LayerHead.predict <layercache.heads.estimator.LayerHead.predict>` on the
stored states. The live side is the :class:`~layercache.live.bundle.LiveBundle` path a service
uses, from token ids on: the cached rows' forward inputs (:mod:`.cached_inputs`, exactly what
extraction ran), the bundle's stopped-early forward pass, its rounding to the storage dtype and its
head. A cache has no texts, so tokenization is not part of it (the manifest's tokenizer fingerprint
is checked when the backbone loads). Agreement counts sequence labels per example and token labels
per word; a regression task reports the largest absolute difference of its values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backbone.loader import Backbone
from ..core.threads import computes
from ..heads.estimator import LayerHead
from ..store.reader import LayerCache, using_cache
from .bundle import LiveBundle
from .cached_inputs import cached_examples
from .head import LiveHead, text_settings
from .verify import check_backbone, load_cache_backbone


@dataclass
class ParityResult:
    """Agreement of one run's cache and live predictions on one split."""

    run: str
    split: str
    examples: int
    tasks: dict[str, dict] = field(default_factory=dict)
    """Task -> ``{"kind", "agree", "compared", "agreement"}``, or ``{"kind", "max_abs_diff"}`` for regression."""

    @property
    def agreement(self) -> float | None:
        """The lowest agreement rate over the classification tasks (None when there are only regression tasks)."""
        rates = [t["agreement"] for t in self.tasks.values() if "agreement" in t]
        return min(rates) if rates else None

    @property
    def max_abs_diff(self) -> float | None:
        """The largest difference of any regression value (None without regression tasks)."""
        diffs = [t["max_abs_diff"] for t in self.tasks.values() if "max_abs_diff" in t]
        return max(diffs) if diffs else None

    def describe(self) -> str:
        """One line: agreement per task."""
        parts = []
        for name, t in self.tasks.items():
            if "agreement" in t:
                unit = "words" if t["kind"] == "token" else "examples"
                parts.append(f"{name} {t['agreement']:.2%} ({t['agree']}/{t['compared']} {unit})")
            else:
                parts.append(f"{name} max |diff| {t['max_abs_diff']:.3g}")
        return f"{Path(self.run).name} on {self.split} ({self.examples} examples), cache vs live: " + "; ".join(parts)

    def to_json(self) -> dict:
        """Plain JSON values."""
        return {"run": self.run, "split": self.split, "examples": self.examples, "tasks": self.tasks,
                "agreement": self.agreement, "max_abs_diff": self.max_abs_diff}


@computes
def parity(run: str | os.PathLike, cache: str | os.PathLike | LayerCache | None = None, split: str = "test", *,
           rows: Sequence[int] | np.ndarray | None = None, backbone: Backbone | None = None, device: str = "auto",
           batch_size: int = 32, allow_pickle: bool = False) -> ParityResult:
    """Agreement of ``run``'s predictions on ``split`` of ``cache``: from the stored states vs the live bundle.

    ``rows``: the cache rows to compare (default: the whole split); ``backbone``: one already loaded
    (default: the cache's, loaded by its manifest and checked against its fingerprints). The run
    must have been trained on a cache of the same backbone (refused otherwise, as ``eval`` does).
    ``allow_pickle`` loads a backbone that has only pickle weights, as ``extract --allow-pickle`` did.
    """
    with using_cache(cache) as handle:
        head = LayerHead.load(run)
        handle.require_split(split)
        cached = head.predict(handle, split)  # refuses a cache from another backbone
        if backbone is None:
            backbone = load_cache_backbone(handle, device=device, allow_pickle=allow_pickle)
        else:
            check_backbone(handle, backbone)
        live = LiveHead.bind(head, backbone.layer_names, Path(run).name or "head", run)
        max_length, stride = text_settings(head)
        bundle = LiveBundle(backbone, [live], max_length=max_length, stride=stride)
        n = handle.num_examples(split)
        rows = np.arange(n) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
        token_task = next((t for t in head.tasks_ if t.kind == "token"), None)
        words = None if token_task is None else handle.labels(split, token_task.name)  # per-word labels
        parts: dict[str, list] = {t.name: [] for t in head.tasks_}
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            examples = cached_examples(handle, split, batch, backbone.tokenizer, causal=backbone.is_causal)
            n_words = None if words is None else np.array([len(words[r]) for r in batch], dtype=np.int64)  # (b,)
            out = bundle._batch(examples, n_words)[live.name]
            for task, (labels, _) in out.items():
                parts[task].extend(labels if isinstance(labels, list) else list(labels))
        result = ParityResult(run=str(run), split=split, examples=len(rows))
        for task in head.tasks_:
            by_row = dict(zip(cached.predictions[task.name].rows.tolist(), cached.predictions[task.name].labels))
            mine = [by_row[int(r)] for r in rows]
            result.tasks[task.name] = _compare(task.kind, mine, parts[task.name])
        return result


def _compare(kind: str, cached: list, live: list) -> dict:
    """Agreement of two predictions of one task (per example, or per word), or the largest regression gap."""
    if kind == "regression":
        gap = np.abs(np.asarray(cached, np.float64) - np.asarray(live, np.float64))  # (n,)
        return {"kind": kind, "max_abs_diff": float(gap.max()) if gap.size else 0.0}
    if kind == "token":
        pairs = [(np.asarray(a), np.asarray(b)) for a, b in zip(cached, live)]
        agree = int(sum(int((a == b).sum()) for a, b in pairs if len(a) == len(b)))
        compared = int(sum(max(len(a), len(b)) for a, b in pairs))
    else:
        agree = int((np.asarray(cached) == np.asarray(live)).sum())
        compared = len(cached)
    return {"kind": kind, "agree": agree, "compared": compared, "agreement": agree / compared if compared else 1.0}
