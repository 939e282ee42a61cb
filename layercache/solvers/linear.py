"""Many independent L2-regularised linear models, fitted as one batched model in torch.

A probe per layer and per regularisation strength is a set of ``G x L`` independent problems on
the same examples. Stacking them makes every step one batched matrix product over all of them
(``(L, N, D) @ (L, D, G*K)``), which reads the features once per step instead of ``G * L`` times,
and the Python and optimiser overhead is paid once. On a CPU the step is bound by reading the
features, so fitting four values of ``C`` costs about what fitting one does.

Objectives, in scikit-learn's ``C`` convention (a fit is comparable with scikit-learn's for the
same ``C``; the intercept is not penalised, as in scikit-learn's ``lbfgs`` solver):

- logistic: ``sum_i s_i CE(x_i W + b, y_i) + ||W||^2 / (2 C)``, with sample weights ``s_i`` (1 by
  default; scikit-learn's ``class_weight`` is ``s_i = class_weight[y_i]``). Multinomial for ``K > 2`` classes;
  binomial (one logit, ``sigmoid``) for two classes, which is what ``LogisticRegression`` fits
  for a binary target (a two-class multinomial with the same ``C`` is the binomial model with
  ``2 C``). Solved with full-batch L-BFGS (``torch.optim.LBFGS``, strong-Wolfe line search) on
  the objective divided by ``N`` (by ``sum_i s_i`` with weights, as scikit-learn's ``lbfgs``
  does): same minimum, gradients of order one.
- ridge: ``sum_i (y_i - x_i w - b)^2 / 2 + ||w||^2 / (2 C)``, i.e. scikit-learn's
  ``Ridge(alpha=1/C)``. Closed form: one eigendecomposition of ``X^T X`` per layer solves every
  ``C`` at once, exactly.

Preconditioning. Hidden states are strongly correlated even after per-dimension
standardisation, so the logistic objective is badly conditioned: plain L-BFGS needed 150-280
iterations on SST-2 MiniLM features. The weights are optimised in other coordinates instead,
``W = Q (d * U) V^T`` (per layer and ``C``): ``V`` holds the eigenvectors of the features' centred
Gram matrix (eigenvalues ``s``), ``Q`` an orthonormal basis of the ``K - 1`` class contrasts (for
``K > 2``), and ``d = (c s / N + 1 / (C N))^(-1/2)`` rescales each direction by the inverse square
root of an estimate of the objective's curvature along it (``c``: the curvature of the loss along
a class contrast, see :func:`fit_logistic`). A change of variables leaves the minimum unchanged;
it brought the SST-2 fits from 150-280 to ~20 iterations.

The grid. All ``C`` are fitted at once from zero rather than one after another with warm starts:
on SST-2 (binary, a step bound by reading the features) one joint fit took 26 evaluations where
four separate fits took 103; on 20k CoNLL words (9 classes, a step bound by arithmetic) warm
starts along the grid saved ~17 % of the time, less than the load noise of a shared machine, so
one code path was kept.

Stopping. As scikit-learn's ``lbfgs``: once the largest entry of the gradient of the
per-example-mean (per-unit-weight) objective in the weights and intercepts themselves is below ``tol``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F

from ..errors import ConfigError

CHECK_EVERY = 10
"""L-BFGS iterations between two checks of the stopping rule (each check costs one evaluation)."""
CONTIGUOUS_WEIGHTS_ROWS = 1024
"""Rows from which the outputs pass copies the weights into the layout its product reads fastest (see evaluate())."""
REMEMBERED_EVALUATIONS = 4
"""Evaluations of the objective the L-BFGS closure remembers, to answer a point it is asked for again."""
PRECONDITION_MAX_DIM = 1024
"""Widest features that get the Gram preconditioner: its eigendecomposition is O(D^3) per layer."""
PRECONDITION_ROWS = 16384
"""Rows of a seeded sample that estimate the Gram matrix: any positive definite preconditioner
leaves the minimum unchanged, so an estimate is enough and keeps its cost independent of N."""


@dataclass
class LinearFit:
    """Weights of ``G x L`` fitted linear models.

    ``coef``: (G, L, D, K) and ``intercept``: (G, L, K), with ``K = 1`` for a binary or a
    regression target. ``n_iter``: L-BFGS iterations (0 for the closed-form ridge).
    """

    coef: Tensor
    intercept: Tensor
    n_iter: int = 0
    converged: bool = True
    """Whether the stopping rule was met (False: ``max_iter`` reached or no more progress)."""
    grad_max: float = 0.0
    """The stopping rule's measure where the fit ended: the largest gradient entry of the per-example-mean objective
    in the weights and intercepts (0 for the closed-form ridge). A fit that stopped short of ``tol`` in fewer than
    ``max_iter`` iterations made no more progress (:func:`unconverged_message` says why)."""


GRADIENT_FLOOR = 1e-4
"""The smallest ``tol`` that :func:`fit_logistic`'s float32 arithmetic reliably reaches (scikit-learn's default, and
ours). Below it L-BFGS can stop making progress short of ``tol``: of 16 seeded small fits (3-6 classes, 400 rows,
2 layers of 20 features, C 1 and 10), 11 stalled at ``tol=1e-6`` (largest gradient entries 1.9e-6 to 7.4e-5 after
16-77 of 500 iterations), 5 at 1e-5 and none at 1e-4. The gradients are right (recomputed in float64 they agree to
three digits); what is left to gain there is a loss decrease near float32's rounding of the per-example losses,
which the line search cannot tell from none."""


def unconverged_message(fit: LinearFit, max_iter: int, tol: float) -> str:
    """One sentence on why :func:`fit_logistic`'s ``fit`` stopped short of ``tol``, naming what to change."""
    reached = f"its largest gradient entry at {fit.grad_max:.1e}, short of tol={tol:g}"
    if fit.n_iter >= max_iter:
        return f"L-BFGS stopped at max_iter={max_iter} with {reached}; raise max_iter for exact fits."
    if tol < GRADIENT_FLOOR:
        return (f"L-BFGS made no more progress after {fit.n_iter} iterations with {reached}: the solver's float32 "
                f"arithmetic reliably resolves the gradient to {GRADIENT_FLOOR:.0e} only, so pass tol >= "
                f"{GRADIENT_FLOOR:.0e} (raising max_iter will not help).")
    return (f"L-BFGS made no more progress after {fit.n_iter} iterations with {reached}: the objective is nearly flat "
            "there (weak regularisation on separable features converges slowest), so leave the largest C out of "
            "C_grid, or take these weights as near the optimum.")


def check_c_grid(C_grid) -> list[float]:
    """``C_grid`` (one number or a list) as ascending floats, refusing in one sentence one that is not all positive.

    The one check of an L2 grid, for every caller of the solvers (probes, convex heads).
    """
    grid = [C_grid] if isinstance(C_grid, (int, float)) else C_grid
    try:
        Cs = sorted(float(c) for c in grid)
    except (TypeError, ValueError):
        raise ConfigError(f"C_grid must be a list of positive numbers, got {C_grid!r}.") from None
    if not Cs or not all(math.isfinite(c) and c > 0 for c in Cs):
        raise ConfigError(f"C_grid must be a non-empty list of positive numbers, e.g. [0.1, 1, 10], got {C_grid!r}.")
    return Cs


def n_outputs(n_classes: int | None) -> int:
    """Output columns for ``n_classes`` (None = regression): one for binary and regression."""
    return 1 if n_classes is None or n_classes == 2 else n_classes


def linear_outputs(X: Tensor, coef: Tensor, intercept: Tensor) -> Tensor:
    """Outputs of one model per layer: X (L, N, D), coef (L, D, K), intercept (L, K) -> (L, N, K)."""
    return torch.baddbmm(intercept.unsqueeze(1), X, coef)  # (L, N, K)


def outputs_to_predictions(Z: Tensor, n_classes: int | None) -> Tensor:
    """(..., N, K) outputs -> (..., N) predictions: class ids, or the regression values."""
    if n_classes is None:
        return Z[..., 0]
    if n_classes == 2:
        return (Z[..., 0] > 0).long()
    return Z.argmax(-1)


def _gram_eigen(X: Tensor, rows: int, seed: int, mean: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
    """The centred Gram matrix of (a sample of) X by its eigen-directions: s (L, r), V (L, D, r), n.

    ``r = min(D, n - 1)``: the centred features of ``n`` rows span at most ``n - 1`` directions, and the weights
    never leave that span (the data's gradient ``dZ^T (X - mean)`` lies in it, the penalty's is the weights
    themselves, and a warm start fitted on a subset of the rows lies in it too), so the other directions are
    dropped rather than carried at zero: with 24 rows of 384-wide states the rotations into and out of the
    eigenbasis cost ``r / D`` of a full basis's (0.35 s -> 0.06 s for an MDL block's fit, 7 layers x 12 models).
    Few rows (``n <= D / 2``) take the eigen-decomposition of the (n, n) kernel instead of the (D, D) Gram
    matrix, the same directions at a fraction of the cost. ``mean`` (L, 1, D), the mean of every row of ``X`` where
    the caller has taken it, saves taking it again when the sample is every row (the same bits; 2-3 ms a fit of
    SST-2's 6,228 x 7 x 384 features).
    """
    L, N, D = X.shape
    if N > rows:
        pick = torch.randperm(N, generator=torch.Generator().manual_seed(seed))[:rows].sort().values
        sample = X.index_select(1, pick)  # (L, rows, D)
    else:
        sample = X
    n = sample.shape[1]
    r = max(1, min(D, n - 1))
    if mean is None or sample is not X:  # the caller's mean of every row serves when the sample is every row
        mean = sample.mean(1, keepdim=True)  # (L, 1, D)
    if 2 * n <= D:
        centred = (sample - mean).double()  # (L, n, D): few rows, so float64 costs little
        s, A = torch.linalg.eigh(torch.bmm(centred, centred.transpose(1, 2)))  # (L, n), (L, n, n) ascending
        s, A = s[:, -r:], A[:, :, -r:]
        # V = Xc^T A s^(-1/2): the Gram matrix's eigenvectors. A direction of (numerically) zero variance, from
        # repeated rows, gets a zero column: the weights along it then get no gradient and stay at zero.
        keep = s > 1e-9 * s[:, -1:].clamp_min(1e-300)  # (L, r)
        V = torch.bmm(centred.transpose(1, 2), A) * torch.where(keep, s, 1.0).rsqrt().unsqueeze(1)  # (L, D, r)
        V = V * keep.unsqueeze(1)
        return torch.where(keep, s, 0.0).float(), V.float(), n
    # float32 products: a bfloat16 Gram matrix ran twice as fast and left the binary SST-2 fits at
    # 20 iterations, but on 56k CoNLL words (9 classes) the fit stopped unconverged at 500
    # iterations where float32's converged in 430.
    gram = torch.bmm(sample.transpose(1, 2), sample)  # (L, D, D)
    gram -= n * mean.transpose(1, 2) @ mean
    # float32 is enough: a preconditioner only needs to be roughly right (and positive), and
    # float32 eigh runs in half the time of float64.
    s, V = torch.linalg.eigh(gram)  # ascending eigenvalues
    return s[:, -r:].clamp_min(0), V[:, :, -r:], n


def fit_logistic(X: Tensor, y: Tensor, n_classes: int, Cs: Tensor, *, max_iter: int = 500, tol: float = 1e-4,
                 history_size: int = 20, precondition: bool | None = None, seed: int = 0,
                 init: LinearFit | None = None, sample_weight: Tensor | None = None) -> LinearFit:
    """Fit one logistic regression per layer and per ``C``, all at once.

    Args:
        X: (L, N, D) float32 features, contiguous (standardised per dimension).
        y: (N,) int64 class ids in ``[0, n_classes)``.
        n_classes: number of classes (at least 2).
        Cs: (G,) inverse regularisation strengths.
        max_iter: L-BFGS iterations at most (one iteration steps all ``G x L`` models).
        tol: stop when the largest entry of the gradient of the per-example-mean objective in
            the weights and intercepts is below it (scikit-learn's rule; its default is 1e-4). Below
            :data:`GRADIENT_FLOOR` a fit may stop short of it for lack of progress (``grad_max`` says where).
        history_size: L-BFGS memory (the models share it; it costs ``history_size``
            parameter-sized vectors, next to nothing).
        precondition: use the Gram preconditioner (default: when ``D <= PRECONDITION_MAX_DIM``).
        seed: seeds the row sample that estimates the Gram matrix.
        init: a fit to start from (warm start), with the same ``G``, ``L``, ``D``, ``K``.
        sample_weight: (N,) positive weight of each example in the loss (default: 1 each). With
            ``class_weight[y]`` it is scikit-learn's ``LogisticRegression(class_weight=...)``: same
            objective, scaled by the weights' sum as its ``lbfgs`` solver scales it, same stopping rule.
    """
    L, N, D = X.shape
    G, K = len(Cs), n_outputs(n_classes)
    if sample_weight is None:
        weight, total = None, float(N)
    else:
        weight = torch.as_tensor(sample_weight, dtype=torch.float32).reshape(N)  # (N,)
        total = float(weight.sum(dtype=torch.float64))
        if not (total > 0 and bool(torch.isfinite(weight).all()) and bool((weight >= 0).all())):
            raise ConfigError("sample_weight must be finite and non-negative with a positive sum; give each "
                              "example a weight of 0 or more.")
    # Free output rows per model. Softmax ignores a shift shared by all classes, so the penalty
    # alone sets the class-mean of the weights, to zero; left free, that direction has curvature
    # 1/(C N) only, far below the others, and the stopping rule waits for L-BFGS to crawl along
    # it. The weights are kept in the (K - 1)-dimensional space of class contrasts instead (an
    # orthonormal basis Q of it, W = Q U): same minimum, no flat direction.
    R = K if K == 1 else K - 1
    GK, GR = G * K, G * R
    # Curvature of the loss along each class contrast. At w = 0, with the intercept at the log
    # class frequencies pi, the Hessian is exactly (diag(pi) - pi pi^T) (x) X^T X / N; Böhning's
    # bound (1/2, 1/4 for binomial) holds everywhere. Frequencies underestimate rare classes once
    # they are predicted, the bound overestimates them all; the fits converged fastest with the
    # geometric mean of the two (objective gap after 160 iterations, 20k CoNLL words, C = 0.1 /
    # 10: 8e-6 / 5e-4, against 2.4e-4 / 5.3e-4 from frequencies, 2.5e-5 / 1.5e-3 from the bound).
    # The (weighted) class frequencies: the best intercept for w = 0 is their logarithm.
    prior = torch.bincount(y.long(), weights=None if weight is None else weight.double(),
                           minlength=n_classes).double() / total
    prior = prior.clamp_min(1.0 / (10 * N))  # a class absent from training keeps a finite start
    prior /= prior.sum()
    if K == 1:
        Q = torch.ones(1, 1, dtype=torch.float64)  # (K, R)
        curvature = (prior[1] * prior[0] * 0.25).sqrt().view(1)  # (R,)
        start = torch.log(prior[1] / prior[0]).view(1)  # (R,) intercept
    else:
        contrasts = torch.linalg.qr(torch.cat([torch.ones(K, 1), torch.eye(K)[:, : K - 1]], 1).double())[0][:, 1:]
        hess = contrasts.T @ (torch.diag(prior) - torch.outer(prior, prior)) @ contrasts  # (K-1, K-1)
        at_start, E = torch.linalg.eigh(hess)
        curvature = (at_start.clamp_min(0) * 0.5).sqrt()  # (R,)
        Q = contrasts @ E  # (K, K-1) orthonormal; its columns diagonalise the class curvature
        start = Q.T @ torch.log(prior)  # (R,) contrasts of the log-frequencies
    Q, curvature, start = Q.float(), curvature.float(), start.float()
    Qg = torch.block_diag(*[Q] * G)  # (G*K, G*R): every model's contrasts to its K outputs
    Cs = torch.as_tensor(Cs, dtype=torch.float32)
    if precondition is None:
        precondition = D <= PRECONDITION_MAX_DIM
    mean = X.mean(1, keepdim=True)  # (L, 1, D): the models read centred features, see below
    if precondition:
        s, V, n = _gram_eigen(X, PRECONDITION_ROWS, seed, mean)  # (L, r), (L, D, r)
        r = s.shape[1]
        # (L, G, R, r): one scale per model, class contrast and feature eigendirection
        d = (curvature.view(1, 1, R, 1) * s.view(L, 1, 1, r) / n + 1.0 / (Cs.view(1, G, 1, 1) * total)).rsqrt()
        d = d.reshape(L, GR, r)
    else:
        r = D
        V = torch.eye(D).expand(L, D, D)
        d = torch.ones(L, GR, D)
    Vt = V.transpose(1, 2)  # (L, r, D)
    inv_cn = (1.0 / (Cs * total)).repeat_interleave(R).view(1, GR, 1)  # the penalty ||w||^2/(2C), over N
    inv_ck = (1.0 / (Cs * total)).repeat_interleave(K).view(1, GK, 1)  # the same on the K output rows
    grad_max = [math.inf]

    # Parameters: u (L, G*R, r) with w^T = Q (d * u) V^T (||w|| = ||d * u||: Q and V have
    # orthonormal columns, or zero ones along which u stays zero), and the contrasts of the
    # intercept of centred features. The outputs are computed as (L, N, D) @ (L, D, G*K) ->
    # (L, N, G*K), reading X in place row by row: with few outputs per model that orientation ran
    # twice as fast on CPU as (L, G*K, D) @ (L, D, N) over the transposed view (SST-2: 4.9 against
    # 9.4 ms; no difference at G*K = 36), and the gradient product (L, G*K, N) @ (L, N, D) reads X
    # in place too.
    U = torch.zeros(L, GR, r)
    b = start.repeat(G).expand(L, GR).clone()  # the best intercept for w = 0
    if init is not None:
        Wt0 = init.coef.permute(1, 0, 3, 2).reshape(L, GK, D)  # (G, L, D, K) -> (L, G*K, D)
        b0 = init.intercept.permute(1, 0, 2).reshape(L, GK) + torch.bmm(Wt0, mean.transpose(1, 2))[..., 0]
        U = torch.bmm(Qg.T.expand(L, GR, GK), torch.bmm(Wt0, V)) / d
        b = b0 @ Qg
    U.requires_grad_(True)
    b.requires_grad_(True)
    QgL = Qg.expand(L, GK, GR)

    def to_outputs(A: Tensor) -> Tensor:  # (L, G*R, D) class contrasts -> (L, G*K, D) output rows
        return A if K == 1 else torch.bmm(QgL, A)

    def to_contrasts(A: Tensor) -> Tensor:  # (L, G*K, D) -> (L, G*R, D), the transpose of to_outputs
        return A if K == 1 else torch.bmm(QgL.transpose(1, 2), A)

    if K == 1:
        target = y.float().view(1, N, 1)  # (1, N, 1)
    else:
        true_class = y.long().view(1, N, 1, 1).expand(L, N, G, 1)  # (L, N, G, 1)
        minus_one = torch.full((1, 1, 1, 1), -1.0).expand(L, N, G, 1)

    # L-BFGS asks for some points twice: the stopping check evaluates the point the line search ended at, which the
    # search itself evaluated (the same bits: both add t * d to the same start), and each round starts at the point
    # the check just evaluated. Those two calls look the point up among the last few evaluations (two objective
    # passes saved per round of CHECK_EVERY iterations); the line search's own calls never repeat a point, so they
    # only store theirs (a copy of the point; the gradients are fresh tensors each time, kept as they are).
    # No two of these functions call each other: functions that do form a reference cycle through their cells, which
    # keeps the features and every tensor evaluate() reads alive after the fit until Python's cycle collector runs
    # (an online code's blocks, each fitted on its own copy of the features, piled up to 100 MiB that way).
    recent: list[tuple] = []  # (U, b, their gradients, grad_max, loss), newest first
    round_start = [False]

    def remembered() -> Tensor | None:
        """The loss at the current point if it is among the recent evaluations (its gradients restored), else None."""
        for point_U, point_b, grad_U, grad_b, largest, loss in recent:
            if torch.equal(point_U, U) and torch.equal(point_b, b):
                U.grad, b.grad, grad_max[0] = grad_U.clone(), grad_b.clone(), largest
                return loss
        return None

    def closure() -> Tensor:
        if round_start[0]:  # L-BFGS's first call of a round: the point the stopping check evaluated
            round_start[0] = False
            loss = remembered()
            if loss is not None:
                return loss
        loss = evaluate()
        recent.insert(0, (U.detach().clone(), b.detach().clone(), U.grad, b.grad, grad_max[0], loss))
        del recent[REMEMBERED_EVALUATIONS:]
        return loss

    def evaluate() -> Tensor:
        # Loss and gradients by hand: autograd would keep more (L, G*K, N) tensors alive; the
        # gradient of the cross-entropy in its logits is p - onehot(y).
        with torch.no_grad():
            Wd = d * U  # (L, G*R, r): weights in the eigenbasis, as class contrasts
            Wt = to_outputs(torch.bmm(Wd, Vt))  # (L, G*K, D)
            # Centred features x - mean, without a centred copy: fold -w.mean into the bias.
            bias = b @ Qg.T - torch.bmm(Wt, mean.transpose(1, 2))[..., 0]  # (L, G*K)
            # Many rows: the weights contiguous as (L, D, G*K), where baddbmm over their transposed view took up to
            # twice as long (SST-2, 2 threads: 6.1 against 3.2 ms a pass; no different when the host is busy). Few rows
            # (an MDL block's fit): the view, as the copy costs more than it saves there.
            W = Wt.transpose(1, 2)  # (L, D, G*K)
            Z = torch.baddbmm(bias.unsqueeze(1), X, W.contiguous() if N >= CONTIGUOUS_WEIGHTS_ROWS else W)
            if K == 1:
                # binomial: loss = softplus(z) - y z; d/dz = sigmoid(z) - y
                per_example = F.softplus(Z) - target * Z  # (L, N, G)
                if weight is not None:
                    per_example.mul_(weight.view(1, N, 1))
                loss = per_example.sum(dtype=torch.float64)
                dZ = torch.sigmoid(Z).sub_(target)  # (L, N, G)
            else:
                Z4 = Z.view(L, N, G, K)
                lse = torch.logsumexp(Z4, dim=3, keepdim=True)  # (L, N, G, 1)
                if weight is None:
                    loss = lse.sum(dtype=torch.float64) - Z4.gather(3, true_class).sum(dtype=torch.float64)
                else:
                    loss = ((lse - Z4.gather(3, true_class)) * weight.view(1, N, 1, 1)).sum(dtype=torch.float64)
                dZ4 = Z4.sub_(lse).exp_()  # softmax, written over the logits
                dZ4.scatter_add_(3, true_class, minus_one)  # p - onehot(y)
                dZ = dZ4.view(L, N, GK)
            if weight is None:
                dZ.div_(N)
            else:  # each example's gradient weighs s_i / sum(s)
                dZ.mul_((weight / total).view(1, N, 1))
            dbias = dZ.sum(1)  # (L, G*K)
            dWt = torch.bmm(dZ.transpose(1, 2), X) - dbias.unsqueeze(2) * mean  # (L, G*K, D): d/dw of the data term
            dWd = torch.bmm(to_contrasts(dWt), V)  # (L, G*R, r), back through Q and V
            U.grad = (dWd + Wd * inv_cn) * d  # chain rule through w = Q (d * u) V^T
            b.grad = dbias @ Qg
            # The stopping rule's gradient: in the weights and intercept themselves, as scikit-learn's
            dW = dWt.add_(dbias.unsqueeze(2) * mean).add_(Wt * inv_ck)  # (L, G*K, D)
            grad_max[0] = max(float(dW.abs().max()), float(dbias.abs().max()))
            # float64 sums: near the end the line search compares losses differing in the 7th digit
            return loss / total + 0.5 * (Wd * Wd * inv_cn).sum(dtype=torch.float64)

    # L-BFGS's own stopping rule would read the gradient in u, whose scale the preconditioner sets;
    # instead it runs in rounds of CHECK_EVERY iterations (its memory carries over) and stops once
    # the largest gradient entry in w and b is below tol, scikit-learn's rule for lbfgs.
    optimizer = torch.optim.LBFGS([U, b], lr=1.0, max_iter=CHECK_EVERY, tolerance_grad=0.0, tolerance_change=1e-12,
                                  history_size=history_size, line_search_fn="strong_wolfe")
    n_iter = 0
    while n_iter < max_iter:
        rounds = min(CHECK_EVERY, max_iter - n_iter)
        optimizer.param_groups[0].update(max_iter=rounds, max_eval=rounds * 10)
        round_start[0] = True
        optimizer.step(closure)
        done = int(optimizer.state[U]["n_iter"]) - n_iter
        n_iter += done
        if remembered() is None:  # the gradient at the point L-BFGS stopped at (the line search may end elsewhere)
            closure()
        if grad_max[0] <= tol or done < rounds:  # converged, or L-BFGS made no more progress
            break
    converged = grad_max[0] <= tol
    with torch.no_grad():
        Wt = to_outputs(torch.bmm(d * U, Vt))  # (L, G*K, D)
        intercept = b @ Qg.T - torch.bmm(Wt, mean.transpose(1, 2))[..., 0]  # (L, G*K)
    coef = Wt.view(L, G, K, D).permute(1, 0, 3, 2).contiguous()  # (G, L, D, K)
    intercept = intercept.view(L, G, K).permute(1, 0, 2).contiguous()  # (G, L, K)
    return LinearFit(coef, intercept, n_iter, converged, grad_max[0])


def fit_ridge(X: Tensor, y: Tensor, Cs: Tensor) -> LinearFit:
    """Fit one ridge regression per layer and per ``C`` (``alpha = 1/C``), exactly.

    X: (L, N, D) float32; y: (N,) float. Centring X and y keeps the intercept out of the
    penalty, as in scikit-learn; the normal equations are solved in float64 through the
    eigendecomposition ``X^T X = V diag(s) V^T``, so every ``alpha`` costs one product.
    """
    L, N, D = X.shape
    Cs = torch.as_tensor(Cs, dtype=torch.float64)
    y64 = y.double()
    y_mean = y64.mean()
    x_mean = X.mean(1, dtype=torch.float64)  # (L, D)
    gram = torch.bmm(X.transpose(1, 2), X).double()  # (L, D, D)
    gram -= N * x_mean.unsqueeze(2) * x_mean.unsqueeze(1)  # centred: (X - m)^T (X - m)
    yc = (y64 - y_mean).float().view(1, N, 1).expand(L, N, 1)
    xty = torch.bmm(X.transpose(1, 2), yc)[..., 0].double()  # (L, D); (X - m)^T yc = X^T yc
    s, V = torch.linalg.eigh(gram)  # (L, D), (L, D, D)
    proj = torch.bmm(V.transpose(1, 2), xty.unsqueeze(2))[..., 0]  # (L, D)
    scaled = proj.unsqueeze(0) / (s.clamp_min(0).unsqueeze(0) + (1.0 / Cs).view(-1, 1, 1))  # (G, L, D)
    w = torch.einsum("lde,gle->gld", V, scaled)  # (G, L, D)
    b = y_mean - (w * x_mean.unsqueeze(0)).sum(-1)  # (G, L)
    return LinearFit(w.float().unsqueeze(-1), b.float().unsqueeze(-1))
