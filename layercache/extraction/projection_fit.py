"""Fit ``--project K``: per kept state, the top K principal directions of its token vectors.

Before the first shard is written, extraction forwards a seeded sample of the first split's planned
batches (:data:`FIT_TOKENS` tokens at most, whole batches in a random order) and accumulates, per
kept state, the sum and the Gram matrix of its real tokens' vectors. Each batch's product is a
float32 matrix product of the vectors minus a shift (the first batch's mean), added into float64
sums: shifted, the products carry the variance rather than the mean, which a float32 product of
raw states (an embedding's mean can dwarf its spread) would round away; float32 products run at
the BLAS's (or the GPU's) full speed, float64 ones at half or far less. The covariance
``C = X^T X / n - mu mu^T`` of the shifted vectors (D x D) gives the principal directions by one
symmetric eigendecomposition (``torch.linalg.eigh``, float64), the same directions PCA on the
sample would find, without ever holding the sample: memory is one (D, D) float64 accumulator per
state, taken in groups of states that fit :data:`ACCUMULATOR_BYTES` (one pass over the sample per
group; a 4096-wide model fits 8 states per pass).

The sample's forward passes are not thrown away: the first pass offers each sampled batch's kept
states to the run's :class:`~.held.HeldStates` (within its byte budget), later passes read them
from there instead of running the model again, and the main pass packs them when the batch's turn
comes, so a held batch's forward runs once in the whole run. A batch the budget could not hold is
forwarded again by each later pass and by the main pass.

The K eigenvectors of largest eigenvalue become the basis rows, largest first, each with its largest
entry made positive so that the same data always gives the same file. The fraction of the state's
variance they keep (their eigenvalues over the trace) is what ``info`` shows.

``--project-basis standardized`` takes the eigenvectors of the correlation matrix instead,
``C / (sigma sigma^T)`` with ``sigma`` the square root of the covariance's diagonal: the same
accumulators, no further pass over the sample. A dimension whose variance is below
:data:`VARIANCE_FLOOR` times the state's mean variance (zero when it is constant on the sample) is
divided by the square root of that floor rather than its own spread: nothing divides by zero, and
a dimension that barely moves (or only by float32 rounding) is not blown up to unit variance; its
standardised variance is below 1 (0 when constant). The stored rows are ``V / sigma`` (the affine map
``z = V ((x - mu) / sigma)``), and the fraction kept is of the standardised variance (the correlation
matrix's trace, D when no dimension is at the floor). The fit runs on the
extraction device (the Gram products are the only work beyond the sample's forward passes); on a
CPU a 1024-wide model spends about a second per state for 16k tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from ..backbone.loader import Backbone
from ..backbone.placement import tokens_of
from ..core.option_names import option
from ..errors import ConfigError
from ..store.projection import Projection, check_projection_basis, check_projection_size
from .forward import pad_windows, token_index
from .held import HeldStates
from .plan import SplitPlan

log = logging.getLogger("layercache")

FIT_TOKENS = 16_384
"""Most tokens of the first split the basis is fitted on (whole batches, so a little more)."""
ACCUMULATOR_BYTES = 1 << 30
"""Most float64 Gram-matrix bytes held at once; wider models take several passes over the sample."""
FIT_SEED = 0
VARIANCE_FLOOR = 1e-8
"""``standardized``: the least variance a dimension is scaled by, relative to the state's mean variance (a standard
deviation of 1e-4 of the typical one; float32 rounding of a constant dimension stays below it)."""


def fit_projection(backbone: Backbone, plan: SplitPlan, keep: Sequence[int], k: int, *, split: str,
                   held: HeldStates | None = None, seed: int = FIT_SEED, max_tokens: int = FIT_TOKENS,
                   basis: str = "pca") -> Projection:
    """The ``--project k`` basis of the kept states ``keep``, fitted on a seeded sample of ``plan``'s batches.

    ``held``: where the sample's forward passes are kept (and read back) for reuse; None forwards every pass.
    ``basis``: ``pca`` or ``standardized`` (:data:`~layercache.store.schema.PROJECTION_BASES`).
    """
    width = backbone.hidden_size
    check_projection_size(k, width)
    check_projection_basis(k, basis)
    order = np.random.default_rng(seed).permutation(len(plan.batches))
    chosen, tokens = [], 0
    for b in order:
        if tokens >= max(max_tokens, 2 * k):
            break
        chosen.append(int(b))
        tokens += plan.batch_tokens(int(b))
    if tokens <= k:
        raise ConfigError(f"{option('project', k)} needs more than {k} tokens to fit, but split {split!r} has only "
                          f"{tokens}; "
                          "choose a smaller K or extract more data.")
    chosen.sort()  # the plan's order: the same batches, read front to back
    per_state = width * width * 8
    group = max(1, ACCUMULATOR_BYTES // per_state)
    means, bases, scales, kept = [], [], [], []
    for start in range(0, len(keep), group):
        states = list(range(start, min(start + group, len(keep))))
        n, shifts, sums, gram = _accumulate(backbone, plan, chosen, [keep[s] for s in states], keep=keep,
                                            split=split, held=held)
        for j in range(len(states)):
            mean = sums[j] / n  # (D,) of the shifted vectors
            cov = gram[j] / n - torch.outer(mean, mean)  # (D, D)
            rows, scale, fraction = principal_rows(cov, k, basis)
            kept.append(fraction)
            means.append((mean + shifts[j]).float().cpu())
            bases.append(rows.float().cpu())
            scales.append(None if scale is None else scale.float().cpu())
    log.info("Fitted %s on %d tokens of %s: %.1f%%-%.1f%% of each state's %svariance kept.",
             option("project", k), n, split, 100 * min(kept), 100 * max(kept),
             "standardised " if basis == "standardized" else "")
    return Projection(mean=torch.stack(means), basis=torch.stack(bases), variance_kept=torch.tensor(kept,
                      dtype=torch.float64), tokens=n, split=split, seed=seed, kind=basis,
                      scale=None if basis == "pca" else torch.stack(scales))


def principal_rows(cov: torch.Tensor, k: int, basis: str = "pca") -> tuple[torch.Tensor, torch.Tensor | None, float]:
    """One state's basis from its covariance ``cov`` (D, D) float64: the rows ``W`` (K, D) with ``z = W (x - mu)``,
    the per-dimension scale (D,) (``standardized``; None for ``pca``) and the fraction of the (standardised)
    variance the K rows keep.

    ``pca``: the covariance's top K eigenvectors. ``standardized``: the correlation matrix's, divided by
    the scale column by column; a dimension below :data:`VARIANCE_FLOOR` is scaled by the floor.
    """
    scale = None
    if basis == "standardized":
        variance = cov.diagonal().clamp_min(0)  # (D,)
        floor = VARIANCE_FLOOR * float(variance.mean())
        scale = variance.clamp_min(floor).sqrt() if floor > 0 else torch.ones_like(variance)  # (D,), never zero
        cov = cov / torch.outer(scale, scale)  # (D, D): the correlation matrix (below 1 on a floored diagonal)
    values, vectors = torch.linalg.eigh(cov)  # ascending
    top = vectors[:, -k:].flip(-1).T.contiguous()  # (K, D), largest variance first
    signs = torch.sign(top.gather(1, top.abs().argmax(1, keepdim=True)))  # (K, 1)
    top = top * torch.where(signs == 0, torch.ones_like(signs), signs)
    total = float(values.clamp_min(0).sum())
    fraction = float(values[-k:].clamp_min(0).sum()) / total if total > 0 else 1.0
    return (top if scale is None else top / scale), scale, fraction  # (K, D): z = V ((x - mu) / scale)


def _accumulate(backbone: Backbone, plan: SplitPlan, batches: list[int], layers: list[int], *,
                keep: Sequence[int], split: str, held: HeldStates | None
                ) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token count, per-state shifts (G, D), and sums (G, D) and Gram matrices (G, D, D) of the shifted vectors
    over ``batches``' real tokens, float64, for the states ``layers`` (a group of ``keep``)."""
    width, device = backbone.hidden_size, backbone.device
    sums = torch.zeros((len(layers), width), dtype=torch.float64, device=device)
    gram = torch.zeros((len(layers), width, width), dtype=torch.float64, device=device)
    shifts: torch.Tensor | None = None  # (G, D) float32: the first batch's means
    n = 0
    with torch.inference_mode():
        for b in batches:
            vectors = _sample_tokens(backbone, plan, b, layers, keep=keep, split=split, held=held)  # (t, D) each
            if shifts is None:
                shifts = torch.stack([x.mean(0) for x in vectors]).to(device)  # (G, D)
            for j, x in enumerate(vectors):
                x = x.to(device) - shifts[j]  # (t, D) float32, centred near zero
                sums[j] += x.sum(0, dtype=torch.float64)
                gram[j] += (x.T @ x).double()
            n += int(vectors[0].shape[0])
    return n, shifts.double().cpu(), sums.cpu(), gram.cpu()


def _sample_tokens(backbone: Backbone, plan: SplitPlan, b: int, layers: list[int], *, keep: Sequence[int],
                   split: str, held: HeldStates | None) -> list[torch.Tensor]:
    """Batch ``b``'s stored tokens of the states ``layers``, (t, D) float32 each on the extraction device.

    Read from ``held`` when an earlier pass (or the dtype probe) held the batch; else forwarded, and
    the forward's kept states offered to ``held`` for the later passes and the main pass. Either way
    the same values: the held states are this forward's, in its dtype.
    """
    device = backbone.device
    batch = held.peek(split, b) if held is not None else None
    if batch is not None:
        return [batch.states[layer].to(device).float() for layer in layers]  # (t, D) each
    examples = [plan.examples[i] for i in plan.batches[b]]
    ids, mask = pad_windows(examples, backbone.tokenizer.pad_token_id)
    hidden = backbone.hidden_states(ids, mask)  # L+1 x (R, W, D)
    index = token_index(examples, mask)  # (t,) stored tokens
    if held is not None:
        held.hold(split, b, hidden, keep, index)
    return [tokens_of(hidden[layer], index, device).float() for layer in layers]  # (t, D) each
