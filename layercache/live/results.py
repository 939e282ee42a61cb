"""What a live bundle returns: each head's predictions per task, in input order, with label names.

:class:`BundlePredictions` holds, per head, the :class:`~layercache.heads.scoring.evaluation.Predictions` of
each of its tasks (the type a cache evaluation returns: class ids and probabilities, per-word class
ids, or values), and :meth:`BundlePredictions.rows` turns them into one JSON-ready dict per input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.tasks import LabelTask
from ..heads.scoring.evaluation import Predictions


@dataclass
class HeadPredictions:
    """One head's predictions: task -> :class:`Predictions` over the inputs, in input order."""

    name: str
    tasks: dict[str, Predictions]

    @classmethod
    def collect(cls, name: str, tasks: list[LabelTask], parts: dict[str, list[tuple]],
                inverse: np.ndarray) -> "HeadPredictions":
        """Join a head's batch results (``parts``: task -> [(labels, probabilities)] in sorted order).

        ``inverse (n,)``: the sorted position of each input, which puts them back in input order.
        """
        out = {}
        for task in tasks:
            batches = parts[task.name]
            if task.kind == "token":
                flat = [words for labels, _ in batches for words in labels]
                labels = [flat[i] for i in inverse]
                probs = None
            else:
                labels = np.concatenate([labels for labels, _ in batches])[inverse]
                probs = None if task.kind == "regression" else np.concatenate([p for _, p in batches])[inverse]
            out[task.name] = Predictions(task, np.arange(len(inverse)), labels, probs)
        return cls(name=name, tasks=out)


@dataclass
class BundlePredictions:
    """Every head's predictions for the inputs of one :meth:`~layercache.live.bundle.LiveBundle.predict` call."""

    texts: list[str]
    """The inputs as read (word lists joined by spaces)."""
    heads: list[HeadPredictions]

    def __getitem__(self, head: str) -> dict[str, Predictions]:
        """The task -> predictions of the head named ``head``."""
        for h in self.heads:
            if h.name == head:
                return h.tasks
        raise KeyError(head)

    def columns(self) -> list[tuple[str, str]]:
        """(head, task) of every prediction column, in bundle order."""
        return [(h.name, task) for h in self.heads for task in h.tasks]

    def rows(self) -> list[dict]:
        """One dict per input: ``text``, then ``{head: {task: prediction}}``.

        A sequence task gives ``label`` (its name) and ``probability`` (of that label) plus every
        class's ``probabilities``; a token task gives ``words`` and one ``tags`` entry per word; a
        regression task gives ``value``.
        """
        out = []
        for i, text in enumerate(self.texts):
            row: dict = {"text": text}
            for h in self.heads:
                row[h.name] = {name: _entry(p, i, text) for name, p in h.tasks.items()}
            out.append(row)
        return out


def _entry(p: Predictions, i: int, text: str) -> dict:
    """Input ``i``'s prediction of one task as plain JSON values."""
    task = p.task
    if task.kind == "regression":
        return {"value": float(p.labels[i])}
    names = task.label_names or ()
    if task.kind == "token":
        tags = [names[k] if k < len(names) else int(k) for k in p.labels[i]]
        return {"words": text.split(), "tags": tags}
    k = int(p.labels[i])
    probs = p.probabilities[i]
    return {"label": names[k] if k < len(names) else k, "probability": float(probs[k]),
            "probabilities": {str(names[c]) if c < len(names) else str(c): float(v) for c, v in enumerate(probs)}}
