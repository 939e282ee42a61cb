"""Predict with a head model over a feed and score the predictions, task by task.

Predictions come back in the feed's row order. Token tasks are scored per *word*: each word takes
the prediction of its first sub-token (as CoNLL evaluation expects); a word the backbone never
saw (cut off at the maximum length) is predicted ``O`` (or class 0), so truncation costs recall
instead of silently shrinking the test set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.tasks import LabelTask
from ...store.batches import CacheBatch, first_subtokens
from ...store.feed import Feed
from ..data.finite import check_outputs
from ..network.model import HeadModel
from . import metrics as M
from .selection import is_iob
from .selection import primary_metric as primary_metric  # its home is selection (no torch there); still read here


@dataclass
class Predictions:
    """One task's predictions over a feed, in row order."""

    task: LabelTask
    rows: np.ndarray
    labels: np.ndarray | list[np.ndarray]
    """(n,) class ids or values; for a token task one (n_words,) array per example."""
    probabilities: np.ndarray | list[np.ndarray] | None = None
    """(n, C) class probabilities of a sequence classification task; for a token task one (n_words, C)
    array per example (each word's first sub-token's; a word the backbone never saw is certain of the
    fill label). None for regression, and where a producer keeps labels only."""


@dataclass
class PassResult:
    """Everything one evaluation pass yields: predictions per task and the mixers' usage summary."""

    predictions: dict[str, Predictions]
    usage: dict[str, dict] = field(default_factory=dict)


@torch.no_grad()
def predict(model: HeadModel, feed: Feed, device: str | torch.device = "cpu") -> PassResult:
    """Run ``model`` over every batch of ``feed`` (eval mode) and collect predictions.

    Refuses non-finite outputs (see :mod:`layercache.heads.data.finite`): NaN or inf states are named by
    split, row and state; finite states with non-finite outputs mean the head itself is broken.
    """
    was_training = model.training
    model.eval()
    rows_seen, per_task = [], {t.name: [] for t in model.tasks}
    totals: dict[str, dict[str, list]] = {}  # mixer key -> summary key -> [sum, count]
    for batch in feed.epoch(shuffle=False):
        (states, scales), mask = batch.stored_on(device), batch.mask.to(device)
        out = model(states, mask, scales)
        check_outputs(out.outputs, feed, batch)  # a NaN state would otherwise become a silent wrong label
        rows_seen.append(batch.rows)
        for t in model.tasks:
            per_task[t.name].append(_batch_predictions(model, t, out.outputs[t.name], batch, feed))
        for key, usage in out.usage.items():
            if not usage:
                continue
            for name, (total, count) in model.mixers[key].usage_totals(usage, mask).items():
                running = totals.setdefault(key, {}).setdefault(name, [0.0, 0])
                running[0] += total
                running[1] += count
    model.train(was_training)
    rows = np.concatenate(rows_seen)
    order = np.argsort(rows, kind="stable")
    result = {}
    for t in model.tasks:
        parts = per_task[t.name]
        if t.kind == "token":
            flat = [p for part in parts for p in part[0]]
            flat_probs = [p for part in parts for p in part[1]]
            result[t.name] = Predictions(t, rows[order], [flat[i] for i in order], [flat_probs[i] for i in order])
        else:
            labels = np.concatenate([p[0] for p in parts])[order]
            probs = None if t.kind == "regression" else np.concatenate([p[1] for p in parts])[order]
            result[t.name] = Predictions(t, rows[order], labels, probs)
    usage = {key: {name: total / max(count, 1) for name, (total, count) in sums.items()}
             for key, sums in totals.items()}
    return PassResult(result, usage)


def _batch_predictions(model: HeadModel, task: LabelTask, output: torch.Tensor, batch: CacheBatch, feed: Feed):
    """One batch's predictions of ``task``: (values, None), (class ids, probabilities), or per-word
    (class ids, probabilities), one array of each per example."""
    if task.kind == "regression":
        return model.regression_values(task.name, output).cpu().numpy(), None
    probs = torch.softmax(output.float(), dim=-1).cpu().numpy()  # (B, C) or (B, T, C)
    if task.kind == "sequence":
        return probs.argmax(-1), probs
    # Token task: per-word predictions from the first sub-token of each word.
    word_ids, n_words = batch.word_ids.numpy(), feed.n_words(batch.rows)
    return word_labels(task, probs.argmax(-1), word_ids, n_words), word_probabilities(task, probs, word_ids, n_words)


def fill_label(task: LabelTask) -> int:
    """The class a word the backbone never saw (cut off at the maximum length) is predicted: ``O``, else class 0.

    Outside every entity is the safe guess for a tagging task: truncation then costs recall, and the
    word still counts in the test set.
    """
    return task.label_names.index("O") if "O" in task.label_names else 0


def word_labels(task: LabelTask, token_labels: np.ndarray, word_ids: np.ndarray,
                n_words: np.ndarray) -> list[np.ndarray]:
    """Per-word class ids of a token task from ``token_labels (B, T)``: each word takes its first sub-token's.

    ``word_ids (B, T)`` (-1 on special tokens and padding) and ``n_words (B,)`` as in a batch; a word
    the backbone never saw (cut off at the maximum length) gets ``O`` (else class 0). One ``(n_words_i,)``
    array per row.
    """
    first = first_subtokens(word_ids, n_words)  # (B, T) the token that carries each word's label
    fill = fill_label(task)
    words = []
    for i, n in enumerate(n_words):
        out = np.full(n, fill, dtype=np.int64)  # (n,)
        out[word_ids[i][first[i]]] = token_labels[i][first[i]]
        words.append(out)
    return words


def word_probabilities(task: LabelTask, token_probs: np.ndarray, word_ids: np.ndarray,
                       n_words: np.ndarray) -> list[np.ndarray]:
    """Per-word class probabilities ``(n_words_i, C)`` from ``token_probs (B, T, C)``, as :func:`word_labels`
    takes labels: each word its first sub-token's, a word the backbone never saw certain of the fill label."""
    first = first_subtokens(word_ids, n_words)  # (B, T)
    fill = fill_label(task)
    words = []
    for i, n in enumerate(n_words):
        out = np.zeros((n, token_probs.shape[-1]), dtype=np.float32)  # (n, C)
        out[:, fill] = 1.0
        out[word_ids[i][first[i]]] = token_probs[i][first[i]]
        words.append(out)
    return words


def score(task: LabelTask, gold, predictions: Predictions) -> dict:
    """Metrics of one task: the primary metric first, then the rest and a per-class report."""
    pred = predictions.labels
    if task.kind == "regression":
        gold = np.asarray(gold, dtype=np.float64)
        pred = np.asarray(pred, dtype=np.float64)
        return {"pearson": M.pearson(gold, pred), "spearman": M.spearman(gold, pred),
                "mse": float(np.mean((gold - pred) ** 2)), "r2": M.r2(gold, pred), "n": len(gold)}
    if task.kind == "token":
        flat_gold, flat_pred = np.concatenate(gold), np.concatenate(pred)
        out = {}
        if is_iob(task):
            names = task.label_names
            spans = M.span_f1([[names[i] for i in g] for g in gold], [[names[i] for i in p] for p in pred])
            out["span_f1"] = spans["f1"]
            out["span_precision"], out["span_recall"] = spans["precision"], spans["recall"]
            out["per_type"] = spans["per_type"]
        out.update({"accuracy": M.accuracy(flat_gold, flat_pred), "macro_f1": M.macro_f1(flat_gold, flat_pred),
                    "mcc": M.matthews_corrcoef(flat_gold, flat_pred), "n_words": len(flat_gold), "n": len(gold)})
        out["report"] = M.classification_report(flat_gold, flat_pred, task.label_names)["per_class"]
        return out
    gold = np.asarray(gold)
    return {"accuracy": M.accuracy(gold, pred), "macro_f1": M.macro_f1(gold, pred),
            "mcc": M.matthews_corrcoef(gold, pred), "n": len(gold),
            "report": M.classification_report(gold, pred, task.label_names)["per_class"]}


def evaluate(model: HeadModel, feed: Feed, device="cpu") -> tuple[dict[str, dict], PassResult]:
    """Predict over ``feed`` and score every task against the feed's gold labels."""
    result = predict(model, feed, device)
    metrics = {}
    for t in model.tasks:
        metrics[t.name] = score(t, feed.gold(t.name), result.predictions[t.name])
    return metrics, result

