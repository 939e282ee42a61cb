"""Evaluation metrics for heads: plain numpy in, Python floats / dicts out.

Classification (``accuracy``, ``macro_f1``, ``matthews_corrcoef``, ``classification_report``),
regression (``pearson``, ``spearman``, ``r2``) and entity-level span F1 for IOB-tagged sequences
(``entity_spans``, ``span_f1``), scored the way conlleval and seqeval's default mode score them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata
from sklearn import metrics as skm

__all__ = [
    "accuracy",
    "macro_f1",
    "matthews_corrcoef",
    "pearson",
    "spearman",
    "r2",
    "classification_report",
    "entity_spans",
    "span_f1",
]


def _pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as 1-D numpy, refusing a length mismatch or empty input."""
    a = np.asarray(y_true).reshape(-1)
    b = np.asarray(y_pred).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"y_true and y_pred must have the same length, got {a.size} and {b.size}")
    if a.size == 0:
        raise ValueError("cannot score empty predictions (got 0 examples)")
    return a, b


# ----------------------------------------------------------------------------- classification
def accuracy(y_true, y_pred) -> float:
    """Fraction of predictions equal to the truth."""
    a, b = _pair(y_true, y_pred)
    return float(np.mean(a == b))


def macro_f1(y_true, y_pred) -> float:
    """Unweighted mean of per-class F1 over the classes seen in truth or prediction (0 when undefined)."""
    a, b = _pair(y_true, y_pred)
    return float(skm.f1_score(a, b, average="macro", zero_division=0))


def matthews_corrcoef(y_true, y_pred) -> float:
    """Matthews correlation (multi-class, Gorodkin's R_K); 0 when a side is constant."""
    a, b = _pair(y_true, y_pred)
    return float(skm.matthews_corrcoef(a, b))


def classification_report(y_true, y_pred, label_names: Sequence[str]) -> dict:
    """Per-class precision / recall / F1 / support, plus accuracy and macro / weighted averages.

    ``y_true`` and ``y_pred`` hold class ids ``0..len(label_names)-1``; classes absent from both
    still get a row (all zeros). Returns::

        {"per_class": {name: {"precision", "recall", "f1", "support"}},
         "accuracy": float, "macro": {...}, "weighted": {...}, "support": int}
    """
    a, b = _pair(y_true, y_pred)
    n = len(label_names)
    for side, values in (("y_true", a), ("y_pred", b)):
        bad = values[(values < 0) | (values >= n) | (values != np.round(values))]
        if bad.size:
            raise ValueError(
                f"{side} holds class id {bad[0].item()!r}, but label_names has {n} names "
                f"(valid ids 0..{n - 1})"
            )
    labels = list(range(n))
    p, r, f, s = skm.precision_recall_fscore_support(a, b, labels=labels, zero_division=0)
    per_class = {
        str(name): {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(s[i])}
        for i, name in enumerate(label_names)
    }
    total = int(s.sum())
    weights = s / total
    return {
        "per_class": per_class,
        "accuracy": accuracy(a, b),
        "macro": {"precision": float(p.mean()), "recall": float(r.mean()), "f1": float(f.mean())},
        "weighted": {
            "precision": float(weights @ p),
            "recall": float(weights @ r),
            "f1": float(weights @ f),
        },
        "support": total,
    }


# --------------------------------------------------------------------------------- regression
def pearson(x, y) -> float:
    """Pearson correlation; NaN when either side is constant (the correlation is undefined)."""
    a, b = _pair(x, y)
    a = a.astype(np.float64) - a.mean()
    b = b.astype(np.float64) - b.mean()
    denom = np.sqrt((a @ a) * (b @ b))
    if denom == 0:
        return float("nan")
    return float(np.clip((a @ b) / denom, -1.0, 1.0))


def spearman(x, y) -> float:
    """Spearman rank correlation (ties get their average rank); NaN when either side is constant."""
    a, b = _pair(x, y)
    return pearson(rankdata(a), rankdata(b))


def r2(y_true, y_pred) -> float:
    """Coefficient of determination ``1 - MSE / Var(y_true)``; NaN when ``y_true`` is constant."""
    a, b = _pair(y_true, y_pred)
    a, b = a.astype(np.float64), b.astype(np.float64)
    variance = float(np.var(a))
    if variance == 0:
        return float("nan")
    return float(1.0 - np.mean((a - b) ** 2) / variance)


# ------------------------------------------------------------------------- entity-level span F1
# conlleval's chunk rules (also seqeval's default mode). Prefixes: B(egin), I(nside), E(nd),
# S(ingle), O(utside). A chunk ends before the current tag when the previous one was E or S, when
# a B, S or O follows an open chunk, or when the type changes; one starts at B or S, at an I or E
# that follows O, E or S (IOB1 style, or a broken IOB2 sequence), or when the type changes.
_PREFIXES = frozenset("BIESO")


def _split_tag(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``."""
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    if not sep or prefix not in _PREFIXES or prefix == "O" or not kind:
        raise ValueError(
            f"tag {tag!r} is not 'O' or '<prefix>-<TYPE>' with prefix one of B, I, E, S "
            "(IOB1, IOB2 or IOBES tags)"
        )
    return prefix, kind


def _ends(prev: str, prev_kind: str, cur: str, kind: str) -> bool:
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and cur in ("B", "S", "O"):
        return True
    return prev != "O" and prev_kind != kind


def _starts(prev: str, prev_kind: str, cur: str, kind: str) -> bool:
    if cur in ("B", "S"):
        return True
    if prev in ("O", "E", "S") and cur in ("I", "E"):
        return True
    return cur != "O" and prev_kind != kind


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one tagged sentence as ``(type, start, end)`` with ``end`` exclusive.

    Accepts IOB1, IOB2 and IOBES tags and reads them as conlleval does: an ``I-`` after ``O`` or
    after another type starts a new entity, a type change inside a span splits it, and ``B-``
    always starts a new entity.
    """
    spans: set[tuple[str, int, int]] = set()
    prev, prev_kind, start = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):  # the sentinel O closes a span at the end
        cur, kind = _split_tag(tag)
        if _ends(prev, prev_kind, cur, kind):
            spans.add((prev_kind, start, i))
        if _starts(prev, prev_kind, cur, kind):
            start = i
        prev, prev_kind = cur, kind
    return spans


def _prf(n_correct: int, n_pred: int, n_true: int) -> dict:
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_true if n_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def span_f1(
    true_sequences: Sequence[Sequence[str]], pred_sequences: Sequence[Sequence[str]]
) -> dict:
    """Entity-level micro precision / recall / F1 over sentences (conlleval / seqeval default).

    An entity counts as correct only when its type, start and end all match. Returns
    ``{"precision", "recall", "f1", "n_true", "n_pred", "n_correct", "per_type": {type: {"precision",
    "recall", "f1", "support"}}}``; a score with a zero denominator is 0.
    """
    if len(true_sequences) != len(pred_sequences):
        raise ValueError(
            f"got {len(true_sequences)} true and {len(pred_sequences)} predicted sentences; they must match"
        )
    true_all: set[tuple[int, str, int, int]] = set()
    pred_all: set[tuple[int, str, int, int]] = set()
    for n, (t, p) in enumerate(zip(true_sequences, pred_sequences)):
        if len(t) != len(p):
            raise ValueError(f"sentence {n} has {len(t)} true and {len(p)} predicted tags; they must match")
        true_all |= {(n, *span) for span in entity_spans(t)}
        pred_all |= {(n, *span) for span in entity_spans(p)}
    correct = true_all & pred_all
    per_type = {}
    for kind in sorted({s[1] for s in true_all | pred_all}):
        n_t = sum(s[1] == kind for s in true_all)
        n_p = sum(s[1] == kind for s in pred_all)
        n_c = sum(s[1] == kind for s in correct)
        per_type[kind] = {**_prf(n_c, n_p, n_t), "support": n_t}
    return {
        **_prf(len(correct), len(pred_all), len(true_all)),
        "n_true": len(true_all),
        "n_pred": len(pred_all),
        "n_correct": len(correct),
        "per_type": per_type,
    }
