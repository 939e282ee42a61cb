"""Paired bootstrap: is one head's selection score on the same examples really above another's?

Two heads scored on one validation set differ by a few examples' worth of luck as well as by skill.
The paired bootstrap (Efron & Tibshirani 1993; Koehn 2004 for NLP metrics) resamples the *examples*
with replacement, scores both heads on each resample, and reads the spread of the difference: its
standard deviation is the standard error of the observed difference, and the share of resamples in
which head ``a`` scores above ``b`` says how sure the validation set is that ``a`` is better. Pairing
matters: both heads see the same resampled examples, so what they get right or wrong together
cancels, and only the examples on which they disagree carry the comparison.

The resampling unit is a row of the split: an example of a sequence task, a sentence of a token
task (its words travel together, as they are not independent), a target of a regression task. A
head with several tasks is scored on each resample by its :class:`~.selection.Selection` (the
loss-weighted mean of the tasks' metrics), every task on the same resampled rows.

Nothing is scored in a Python loop over resamples where it can be avoided: each row is reduced
once to the counts its metric sums (its cell of the confusion matrix; per sentence, the confusion
cells of its words and its correct, predicted and true entities; for regression, the moments of
prediction and target), and a resample's metric is computed from the weighted sums of those
counts, a thousand resamples in one matrix product. Spearman's correlation re-ranks every resample
and is the one metric computed resample by resample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...core.tasks import LabelTask
from ...errors import ConfigError
from . import metrics as M
from .evaluation import Predictions, is_iob
from .selection import Selection

RESAMPLES = 1000
"""Bootstrap resamples per comparison: the share ``p_better`` is then known to about ±0.015."""
CHUNK = 100
"""Resamples drawn at a time: the (chunk, rows) weight matrix stays small for large validation splits."""


@dataclass(frozen=True)
class PairedComparison:
    """Head ``a`` against head ``b`` on the same rows: the observed difference and its bootstrap spread."""

    difference: float
    """``score(a) - score(b)`` on the rows as they are."""
    se: float
    """The bootstrap standard error of that difference."""
    p_better: float
    """The share of resamples in which ``a`` scores above ``b`` (a tie counts half)."""
    rows: int
    """Rows resampled (examples, or sentences of a token task)."""
    resamples: int

    def to_json(self) -> dict:
        """Plain JSON of the fields."""
        return {"difference": self.difference, "se": self.se, "p_better": self.p_better, "rows": self.rows,
                "resamples": self.resamples}


def paired_bootstrap(selection: Selection, tasks: Sequence[LabelTask], gold: Mapping[str, np.ndarray | list],
                     a: Mapping[str, Predictions], b: Mapping[str, Predictions], *, resamples: int = RESAMPLES,
                     seed: int = 0) -> PairedComparison:
    """Compare the selection scores of predictions ``a`` and ``b`` of ``tasks`` on the same rows.

    ``gold`` and both prediction sets are ``{task: ...}`` in one row order (as a pass over one feed
    yields them). The resamples are seeded, so a comparison is repeatable.
    """
    if resamples < 1:
        raise ConfigError(f"A paired bootstrap needs at least one resample, got {resamples}.")
    sizes = {len(gold[t.name]) for t in tasks}
    if len(sizes) != 1:
        raise ConfigError("The tasks of a paired comparison must cover the same rows.")
    n = sizes.pop()
    if n == 0:
        raise ConfigError("A paired comparison needs at least one row to resample.")
    for t in tasks:
        for side in (a, b):
            if len(side[t.name].labels) != n:
                raise ConfigError(f"The predictions of task {t.name!r} cover {len(side[t.name].labels)} rows, the "
                                  f"gold labels {n}; compare passes over the same rows.")
    scorers = [_TaskScorer(t, selection.metrics[t.name], gold[t.name], a[t.name].labels, b[t.name].labels)
               for t in tasks]
    weights = np.array([selection.weights.get(t.name, 1.0) for t in tasks], dtype=np.float64)

    def combined(weights_by_row: np.ndarray) -> np.ndarray:
        """(R,) selection-score differences a - b for row weights (R, n)."""
        per_task = np.stack([s.difference(weights_by_row) for s in scorers])  # (T, R)
        return weights @ per_task / weights.sum()

    observed = float(combined(np.ones((1, n)))[0])
    rng = np.random.default_rng(seed)
    draws = []
    for start in range(0, resamples, CHUNK):
        count = min(CHUNK, resamples - start)
        draws.append(combined(_resample_counts(rng, n, count)))
    diffs = np.concatenate(draws)  # (R,)
    p_better = float(np.mean((diffs > 0) + 0.5 * (diffs == 0)))
    se = float(diffs.std(ddof=1)) if resamples > 1 else 0.0
    return PairedComparison(observed, se, p_better, n, resamples)


def _resample_counts(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """(count, n) float64: how often each of ``n`` rows is drawn in each of ``count`` resamples of ``n`` draws with
    replacement. The same distribution as ``rng.multinomial(n, [1 / n] * n, count)``, at a fifth of its time (one
    bincount of uniform draws; the comparisons of a ``plan`` spent a second or more in the multinomial)."""
    rows = rng.integers(0, n, size=(count, n)) + np.arange(count)[:, None] * n  # (count, n): resample r's rows
    return np.bincount(rows.ravel(), minlength=count * n).reshape(count, n).astype(np.float64)


class _TaskScorer:
    """One task's metric for two heads under row weights, from per-row counts reduced once."""

    def __init__(self, task: LabelTask, metric: str, gold, pred_a, pred_b) -> None:
        self.task, self.metric = task, metric
        self.n_classes = len(task.label_names or ())
        if metric == "spearman":  # ranks change with every resample: kept as values
            self.values = [np.asarray(gold, dtype=np.float64), np.asarray(pred_a, dtype=np.float64),
                           np.asarray(pred_b, dtype=np.float64)]
            self.counts = None
        else:
            self.counts = [self._row_counts(gold, pred_a), self._row_counts(gold, pred_b)]  # 2 x (n, k)

    def difference(self, weights: np.ndarray) -> np.ndarray:
        """(R,) metric(a) - metric(b) for row weights (R, n): a resample's rows, counted as often as drawn."""
        if self.counts is None:
            return self._spearman(weights, 1) - self._spearman(weights, 2)
        a, b = (self._metric(weights @ counts) for counts in self.counts)
        return np.nan_to_num(a, nan=0.0) - np.nan_to_num(b, nan=0.0)  # an undefined metric reads as no skill

    # --- per-row counts ---------------------------------------------------------------------
    def _row_counts(self, gold, pred) -> np.ndarray:
        """(n, k) what each row adds to the sums its metric is computed from."""
        if self.task.kind == "regression":
            x, y = np.asarray(gold, dtype=np.float64), np.asarray(pred, dtype=np.float64)
            return np.stack([np.ones_like(x), x, y, x * x, y * y, x * y], axis=1)  # (n, 6): moments
        c = self.n_classes
        if self.task.kind == "sequence":
            cells = np.asarray(gold, dtype=np.int64) * c + np.asarray(pred, dtype=np.int64)  # (n,)
            return np.eye(c * c)[cells]  # (n, C*C): each row's confusion cell
        if self.metric == "span_f1" and is_iob(self.task):
            names = self.task.label_names
            out = np.zeros((len(gold), 3))
            for i, (g, p) in enumerate(zip(gold, pred)):
                true = M.entity_spans([names[j] for j in g])
                found = M.entity_spans([names[j] for j in p])
                out[i] = (len(true & found), len(found), len(true))  # correct, predicted, true entities
            return out
        cells = [np.bincount(np.asarray(g, dtype=np.int64) * c + np.asarray(p, dtype=np.int64), minlength=c * c)
                 for g, p in zip(gold, pred)]
        return np.stack(cells).astype(np.float64)  # (n, C*C): each sentence's words' confusion cells

    # --- a metric from summed counts ----------------------------------------------------------
    def _metric(self, sums: np.ndarray) -> np.ndarray:
        """(R,) the metric from the weighted sums (R, k) of the row counts; NaN where it is undefined."""
        if self.task.kind == "regression":
            return _regression(self.metric, sums)
        if self.metric == "span_f1":
            correct, predicted, true = sums.T
            with np.errstate(invalid="ignore", divide="ignore"):
                f1 = 2 * correct / (predicted + true)  # 2PR / (P + R), without the zero divisions
            return np.where(correct > 0, f1, 0.0)
        c = self.n_classes
        return _classification(self.metric, sums.reshape(-1, c, c))

    def _spearman(self, weights: np.ndarray, side: int) -> np.ndarray:
        gold, pred = self.values[0], self.values[side]
        out = np.empty(len(weights))
        for r, w in enumerate(weights):
            rows = np.repeat(np.arange(len(w)), w.astype(np.int64))  # the resample's rows, repeats included
            out[r] = M.spearman(gold[rows], pred[rows])
        return out


def _classification(metric: str, confusion: np.ndarray) -> np.ndarray:
    """(R,) accuracy, macro-F1 or Matthews correlation of confusion matrices (R, C, C) [gold, predicted]."""
    total = confusion.sum((1, 2))  # (R,)
    correct = np.trace(confusion, axis1=1, axis2=2)  # (R,)
    true, predicted = confusion.sum(2), confusion.sum(1)  # (R, C) each
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "accuracy":
            return correct / total
        if metric == "macro_f1":  # over the classes seen in truth or prediction, as scikit-learn averages
            seen = (true + predicted) > 0
            f1 = np.where(seen, 2 * np.diagonal(confusion, axis1=1, axis2=2) / np.where(seen, true + predicted, 1),
                          0.0)
            return f1.sum(1) / np.maximum(seen.sum(1), 1)
        if metric == "mcc":  # Gorodkin's R_K, as scikit-learn computes it; 0 when a side is constant
            cov_tp = correct * total - (true * predicted).sum(1)
            cov_pp = total ** 2 - (predicted ** 2).sum(1)
            cov_tt = total ** 2 - (true ** 2).sum(1)
            denominator = np.sqrt(cov_tt * cov_pp)
            return np.where(denominator > 0, cov_tp / np.where(denominator > 0, denominator, 1), 0.0)
    raise ConfigError(f"The paired bootstrap cannot score classification metric {metric!r}.")


def _regression(metric: str, sums: np.ndarray) -> np.ndarray:
    """(R,) Pearson correlation or R² from summed moments (R, 6): n, Σx, Σy, Σx², Σy², Σxy (x the target)."""
    n, sx, sy, sxx, syy, sxy = sums.T
    var_x, var_y = sxx - sx * sx / n, syy - sy * sy / n  # n times the variances
    cov = sxy - sx * sy / n
    # A constant side leaves rounding error, not zero, in Σx² - (Σx)²/n: compare it with Σx².
    spread_x, spread_y = var_x > 1e-12 * np.abs(sxx), var_y > 1e-12 * np.abs(syy)
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "pearson":
            defined = spread_x & spread_y
            correlation = cov / np.sqrt(np.where(defined, var_x * var_y, 1.0))
            return np.where(defined, np.clip(correlation, -1.0, 1.0), np.nan)
        if metric == "r2":
            squared_error = sxx - 2 * sxy + syy  # Σ(x - y)²
            return np.where(spread_x, 1 - squared_error / np.where(spread_x, var_x, 1.0), np.nan)
    raise ConfigError(f"The paired bootstrap cannot score regression metric {metric!r}.")
