"""The convex fit of a head that is a linear model on fixed features: full batch, ``C`` chosen on validation.

When no mixer learns anything (``last``, ``layer:<i>``) and every head's output layer reads its
mixer's states directly (:func:`~.fitting.convex_obstacle`), each task's head is a logistic
regression (binomial for two classes, multinomial for more) or a ridge regression on fixed vectors:
for a sequence task the pooled state its mixer selects, for a token task the mixed state of each
word's first sub-token (the token that carries the word's label, and whose prediction the word
takes at evaluation). That problem has one optimum, so it is fitted as the probes fit theirs
(:mod:`layercache.solvers`), not by minibatches stopped early:

1. one unshuffled pass over each feed collects every head's input vectors ``(N, D)`` through the
   model itself (input normalisation, mixer, pooling: the vectors the output layer will read) and
   the labels; a token task's ``N`` counts words (first sub-tokens), not examples;
2. the vectors are standardised per dimension with the training vectors' own mean and std (L-BFGS
   needs it, and one grid of ``C`` then suits any layer; the probes do the same);
3. every ``C`` of the grid is fitted at once: :func:`~layercache.solvers.fit_logistic` on the
   standardised vectors, with each example (word) weighted by its class's weight when the task has
   class weights (scikit-learn's ``class_weight``), or :func:`~layercache.solvers.fit_ridge` in
   closed form on the standardised targets a regression head predicts;
4. each task keeps the ``C`` whose model scores best on the validation data by the task's selection
   metric (:mod:`..scoring.selection`), scored as evaluation scores it: a token task per word, against the
   feed's word labels, a word the backbone never saw (cut off at the maximum length) predicted as
   :func:`~..scoring.evaluation.word_labels` predicts it; ties go to the smallest ``C``, the strongest penalty;
5. the standardisation is folded into the head's output layer (weights ``W / std``, bias
   ``b - (mean / std) W``; a binomial logit ``z`` becomes the two logits ``(-z/2, z/2)``), so the
   result is an ordinary :class:`~..network.model.HeadModel`: saved, loaded, scored and predicted as any other.

The fitted head is scikit-learn's ``make_pipeline(StandardScaler(), LogisticRegression(C=C,
class_weight=...))`` (``Ridge(alpha=1/C)`` for regression) on the same vectors: same objective, same
stopping rule. It does not depend on the head's input normalisation, which is one affine map per
dimension (or a per-token norm before pooling) that the standardisation absorbs or reads through.

Tasks are independent problems (a fixed mixer shares nothing that learns), so each task gets its
own ``C``; loss weights scale a task's loss against the others' and leave its optimum alone. The
minibatch settings (epochs, learning rate, weight decay, schedule, dropout, batch size) are not
used: the L2 penalty is the regulariser.

Memory: the training vectors are held once as float32 (CoNLL-2003's ~200k training words at
``D = 384``: ~300 MB) plus their standardised copy; the standardisation runs in row chunks so no
float64 copy of them is made, and the validation outputs are computed one ``C`` at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ...core.tasks import IGNORE_INDEX, LabelTask
from ...errors import ConfigError
from ...solvers import check_c_grid, fit_logistic, fit_ridge
from ...store.batches import first_subtokens
from ...store.feed import Feed
from ..data.finite import non_finite_input
from ..network.model import HeadModel
from ..network.tasks import TokenHead, task_loss
from ..scoring.evaluation import Predictions, fill_label, score
from ..scoring.selection import SELECTION_METRICS, Selection
from .trainer import EpochRecord, TrainHistory

log = logging.getLogger(__name__)

DEFAULT_C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
"""Inverse L2 strengths tried (scikit-learn's ``C``), half a decade apart around its default of 1."""
MAX_ITER = 500
"""L-BFGS iterations at most (each one steps every ``C`` of the grid)."""
TOL = 1e-4
"""L-BFGS stops when the largest gradient entry of the per-example-mean objective is below this
(scikit-learn's rule and default)."""
METHODS = {"logistic": "L-BFGS", "ridge": "ridge (closed form)"}
TOKENS = "tokens"
"""What stands for the pooling in a token head's group (:func:`_group`): it reads each word's first
sub-token, unpooled."""
STANDARDIZE_ROWS = 65536
"""Vectors standardised at a time: float64 arithmetic without a float64 copy of them all."""


def resolved_c_grid(C_grid: float | Sequence[float] | None) -> np.ndarray:
    """The ascending grid of ``C`` (float64; default :data:`DEFAULT_C_GRID`), checked by the solvers' one rule."""
    return np.asarray(check_c_grid(DEFAULT_C_GRID if C_grid is None else C_grid), dtype=np.float64)


@dataclass
class _Words:
    """Where a feed's collected first sub-tokens sit among its words, laid out in row order."""

    rows: np.ndarray
    """``(n,)`` the feed's rows, ascending (the order of its gold labels and of evaluation's predictions)."""
    counts: np.ndarray
    """``(n,)`` words of each of ``rows``, words cut off at the maximum length included."""
    slots: np.ndarray
    """``(N_tok,)`` each collected token's word, as an index into the words of ``rows`` one after another."""

    def predictions(self, task: LabelTask, token_labels: np.ndarray) -> Predictions:
        """Per-word predictions of ``task`` from ``token_labels (N_tok,)``, as evaluation builds them.

        Each word takes its first sub-token's label; a word no token carries (cut off at the maximum
        length) gets :func:`~..scoring.evaluation.fill_label`, as :func:`~..scoring.evaluation.word_labels` does.
        """
        flat = np.full(int(self.counts.sum()), fill_label(task), dtype=np.int64)  # (n_words,)
        flat[self.slots] = token_labels
        return Predictions(task, self.rows, np.split(flat, np.cumsum(self.counts)[:-1]))


@dataclass
class _Inputs:
    """One feed's head inputs and labels, in the feed's order."""

    vectors: dict[tuple[str, str], Tensor]
    """(mixer key, pooling) -> ``(N, D)`` float32: what the output layer of the heads that pool so reads;
    (mixer key, :data:`TOKENS`) -> ``(N_tok, D)``: the mixed state of every word's first sub-token."""
    labels: dict[str, Tensor]
    """task -> ``(N,)`` class ids (int64) or targets (float32); a token task's ``(N_tok,)`` word labels
    (``IGNORE_INDEX`` on a word without one)."""
    rows: np.ndarray
    """``(N,)`` the feed's row of each vector."""
    words: _Words | None
    """Where the first sub-tokens' words are (a model with a token task), else None."""


@dataclass
class _TaskFit:
    """One task's chosen model, as the head's output layer: ``weight (n_out, D)``, ``bias (n_out,)``."""

    weight: Tensor
    bias: Tensor
    C: float
    grid_scores: list[float]
    metrics: dict
    """The task's validation metrics at the chosen ``C``."""
    train_loss: float
    method: str
    n_iter: int
    converged: bool
    n_train: int


def _group(model: HeadModel, task: str) -> tuple[str, str]:
    """Heads with the same mixer and pooling read the same vectors; token heads read the first sub-tokens'."""
    head = model.heads[task]
    return model.mixer_key(task), TOKENS if isinstance(head, TokenHead) else head.pooling


@torch.no_grad()
def _read(model: HeadModel, feed: Feed, device) -> _Inputs:
    """Every head's input vectors over one unshuffled pass of ``feed``, refusing non-finite states or targets."""
    readers = {}  # (mixer key, pooling) -> the first head that pools so
    for t in model.tasks:
        readers.setdefault(_group(model, t.name), model.heads[t.name])
    tokens = any(t.kind == "token" for t in model.tasks)
    parts: dict[tuple[str, str], list[Tensor]] = {g: [] for g in readers}
    labels: dict[str, list[Tensor]] = {t.name: [] for t in model.tasks}
    rows, counts, token_example, token_word = [], [], [], []
    seen = 0  # examples before this batch in the pass
    for batch in feed.epoch(shuffle=False):
        error = non_finite_input(feed, batch)
        if error is not None:
            raise error
        mask = batch.mask.to(device)
        states, scales = batch.stored_on(device)
        mixed = model.mix(states, mask, scales)
        if tokens:
            # The tokens evaluation reads a word's prediction from (and the only ones that carry labels).
            word_ids, n_words = batch.word_ids.numpy(), feed.n_words(batch.rows)  # (B, T), (B,)
            first = torch.from_numpy(first_subtokens(word_ids, n_words))  # (B, T)
            example, position = np.nonzero(first.numpy())  # row-major, as boolean indexing below
            token_example.append(seen + example)
            token_word.append(word_ids[example, position])
            counts.append(n_words)
            on_device = first.to(device)
        for (key, pooling), head in readers.items():
            if pooling == TOKENS:
                parts[key, pooling].append(mixed[key].mixed[on_device].float().cpu())  # (n_first, D)
            else:
                parts[key, pooling].append(head.pool(mixed[key].mixed, mask).float().cpu())  # (B, D)
        for t in model.tasks:
            y = batch.labels[t.name]  # (B,) or, for a token task, (B, T)
            labels[t.name].append(y[first] if t.kind == "token" else y)
        rows.append(np.asarray(batch.rows))
        seen += len(batch.rows)
    rows_seen = np.concatenate(rows)
    words = None
    if tokens:
        order = np.argsort(rows_seen, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))  # (N,) each pass position's place in row order
        ordered_counts = np.concatenate(counts)[order]  # (N,)
        starts = np.cumsum(ordered_counts) - ordered_counts  # (N,) first word of each row, in row order
        slots = starts[rank[np.concatenate(token_example)]] + np.concatenate(token_word)  # (N_tok,)
        words = _Words(rows_seen[order], ordered_counts, slots)
    return _Inputs({g: torch.cat(p) for g, p in parts.items()}, {k: torch.cat(v) for k, v in labels.items()},
                   rows_seen, words)


def _labelled(task: LabelTask, y: Tensor) -> Tensor:
    """``(N,)`` True where the example (word) carries a label of ``task`` (a sequence or word label may be missing)."""
    if task.kind == "regression":
        return torch.ones_like(y, dtype=torch.bool)  # non-finite targets were refused while reading
    return y != IGNORE_INDEX


def _standardiser(X: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and scale ``(D,)`` (float64) of training vectors ``X (N, D)``; a constant dimension is centred only."""
    total = X.new_zeros(X.shape[1], dtype=torch.float64)  # (D,)
    for chunk in X.split(STANDARDIZE_ROWS):
        total += chunk.sum(0, dtype=torch.float64)
    mean = total / len(X)
    squares = torch.zeros_like(mean)  # (D,) two passes: no cancellation in the variance
    for chunk in X.split(STANDARDIZE_ROWS):
        squares += ((chunk.double() - mean) ** 2).sum(0)
    std = (squares / len(X)).sqrt()
    return mean, torch.where(std > 1e-12, std, torch.ones_like(std))


def _standardised(X: Tensor, mean: Tensor, scale: Tensor) -> Tensor:
    """``(1, N, D)`` float32 ``(X - mean) / scale``, contiguous, computed in float64 chunk by chunk."""
    Z = torch.empty(1, *X.shape, dtype=torch.float32)
    for at in range(0, len(X), STANDARDIZE_ROWS):
        Z[0, at:at + STANDARDIZE_ROWS] = (X[at:at + STANDARDIZE_ROWS].double() - mean) / scale
    return Z


def _fit_task(model: HeadModel, task: LabelTask, train: _Inputs, val: _Inputs, metric: str, Cs: np.ndarray,
              seed: int, val_gold: list[np.ndarray] | None) -> _TaskFit:
    """Fit every ``C`` for one task, keep the best on validation, return it as the head's output layer.

    ``val_gold``: a token task's validation word labels (the feed's gold, in row order); None otherwise.
    """
    group = _group(model, task.name)
    keep = _labelled(task, train.labels[task.name])
    vectors = train.vectors[group]
    X = vectors if bool(keep.all()) else vectors[keep]  # (N, D): no copy of a token task's ~300 MB when it can
    y = train.labels[task.name][keep]  # (N,)
    held = _labelled(task, val.labels[task.name])
    if task.kind == "token":
        # Every seen word is predicted, labelled or not, and scored against the feed's gold, as evaluation does.
        X_val, gold = val.vectors[group], val_gold  # (N_val, D)
    else:
        X_val, gold = val.vectors[group][held], val.labels[task.name][held].numpy()
    for name, count in (("training", len(y)), ("validation", int(held.sum()))):
        if count == 0:
            raise ConfigError(f"The {name} data of task {task.name!r} has no labelled examples; train on a split "
                              "that has labels.")
    mean, scale = _standardiser(X)
    Z = _standardised(X, mean, scale)  # (1, N, D)
    grid = torch.from_numpy(Cs)
    class_weights = model.class_weight_tensor(task.name)
    if task.kind == "regression":
        # The head predicts standardised targets; ridge is linear in the target, so this is Ridge on y, scaled.
        mean_y, std_y = (float(getattr(model, f"target_{what}_{task.name}")) for what in ("mean", "std"))
        target = (y.double() - mean_y) / std_y
        fit, method = fit_ridge(Z, target.float(), grid), "ridge"
    else:
        weight = None if class_weights is None else class_weights.cpu()[y]  # (N,) scikit-learn's class_weight
        fit, method = fit_logistic(Z, y, task.num_classes, grid, max_iter=MAX_ITER, tol=TOL, seed=seed,
                                   sample_weight=weight), "logistic"
    del Z  # the standardised copy (a token task's ~300 MB) is not read again
    coef, intercept = fit.coef[:, 0].double(), fit.intercept[:, 0].double()  # (G, D, K), (G, K)
    # Fold the standardisation in: ((x - m) / s) c + b = x (c / s) + (b - (m / s) c).
    W = coef / scale.view(1, -1, 1)  # (G, D, K)
    b = intercept - torch.einsum("d,gdk->gk", mean / scale, coef)  # (G, K)
    if task.kind != "regression" and task.num_classes == 2:  # one binomial logit z -> logits (-z/2, z/2)
        W, b = torch.cat([-W / 2, W / 2], dim=2), torch.cat([-b / 2, b / 2], dim=1)
    W, b = W.float(), b.float()  # (G, D, n_out), (G, n_out): the head's float32 weights
    scores, metrics = [], []
    for g in range(len(Cs)):  # one C at a time: a token task's validation outputs for every C may be large
        outputs = torch.addmm(b[g], X_val, W[g])  # (N_val, n_out), as the head's output layer computes them
        if task.kind == "regression":
            predicted = outputs[:, 0] * std_y + mean_y  # the head's regression_values, in the targets' units
            found = Predictions(task, val.rows[held.numpy()], predicted.numpy())
        elif task.kind == "token":
            found = val.words.predictions(task, outputs.argmax(-1).numpy())
        else:
            probabilities = torch.softmax(outputs, dim=-1).numpy()
            found = Predictions(task, val.rows[held.numpy()], probabilities.argmax(-1), probabilities)
        metrics.append(score(task, gold, found))
        scores.append(SELECTION_METRICS[metric].read(metrics[-1]))
    choice = int(np.argmax(scores))  # the first best: the smallest such C
    train_out = X @ W[choice] + b[choice]  # (N, n_out)
    weights = None if class_weights is None else class_weights.cpu()
    if task.kind == "regression":
        loss = task_loss(task, train_out, target.float())
    elif task.kind == "token":  # the token loss reads (B, T, n_out): one row of every labelled word
        loss = task_loss(task, train_out.unsqueeze(0), y.unsqueeze(0), weights)
    else:
        loss = task_loss(task, train_out, y, weights)
    return _TaskFit(W[choice].T.contiguous(), b[choice].contiguous(), float(Cs[choice]), [float(s) for s in scores],
                    metrics[choice], float(loss), method, fit.n_iter, fit.converged, len(y))


def fit_convex(model: HeadModel, train_feed: Feed, val_feed: Feed, selection: Selection, *,
               C_grid: float | Sequence[float] | None = None, device: str | torch.device = "cpu",
               seed: int = 0) -> TrainHistory:
    """Fit a linear-on-fixed-features ``model``'s heads exactly, choosing each task's ``C`` on ``val_feed``.

    ``model`` must qualify (:func:`~.fitting.convex_obstacle` is None); its regression target
    statistics and class weights must be set. Returns a history of one record (the fitted model),
    with ``solver="lbfgs"`` and the choices in ``fit`` (``n_train``: the labelled training examples,
    words for a token task); the weights are written into the model.
    """
    started = time.perf_counter()
    Cs = resolved_c_grid(C_grid)
    model.to(device).eval()
    train, val = _read(model, train_feed, device), _read(model, val_feed, device)
    fits = {t.name: _fit_task(model, t, train, val, selection.metrics[t.name], Cs, seed,
                              val_feed.gold(t.name) if t.kind == "token" else None)
            for t in model.tasks}
    with torch.no_grad():
        for name, fitted in fits.items():
            out = model.heads[name].out
            out.weight.copy_(fitted.weight)
            out.bias.copy_(fitted.bias)
    chosen = {name: f.metrics for name, f in fits.items()}
    loss = sum(model.loss_weights[name] * f.train_loss for name, f in fits.items())
    seconds = time.perf_counter() - started
    score_value = selection.score(chosen)
    # lr 0: no learning rate was used
    record = EpochRecord(1, float(loss), score_value, selection.values(chosen), 0.0, seconds)
    fit = {"method": {n: METHODS[f.method] for n, f in fits.items()}, "C": {n: f.C for n, f in fits.items()},
           "C_grid": [float(c) for c in Cs], "grid_scores": {n: f.grid_scores for n, f in fits.items()},
           "n_iter": {n: f.n_iter for n, f in fits.items()}, "converged": {n: f.converged for n, f in fits.items()},
           "n_train": {n: f.n_train for n, f in fits.items()},
           "standardize": "per dimension with the training vectors' mean and std, folded into the output layer"}
    return TrainHistory(epochs=[record], best_epoch=1, best_score=score_value, seconds=seconds,
                        metric=dict(selection.metrics), solver="lbfgs", fit=fit)


def convergence_warnings(history: TrainHistory) -> list[str]:
    """One warning per task whose L-BFGS fit stopped before reaching the tolerance."""
    return [f"The L-BFGS fit of task {task!r} stopped after {history.fit['n_iter'][task]} iterations before reaching "
            f"tol={TOL:g}, so its weights are near, not at, the optimum; leave the largest C out of C_grid (it "
            "converges slowest)."
            for task, ok in history.fit.get("converged", {}).items() if not ok]
