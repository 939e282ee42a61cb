"""Score lenses layer by layer on a split of a decoder cache: how close each layer's lens distribution is to the
model's own, and how well it predicts the next token.

A lens maps the state ``h_l`` of layer ``l`` to next-token logits through the model's final norm and unembedding:
the logit lens as it is (``logits = W_U · norm(h_l)``), a tuned lens through a learned affine translator first
(``W_U · norm(h_l + A_l h_l + b_l)``, :mod:`.tuned_lens`). Per layer, over the tokens of the split:

- **kl**: mean ``KL(p_L || p_l)`` in nats, ``p_L`` the final layer's distribution (the model's output);
- **cross_entropy**: mean next-token cross-entropy in bits (``-log2 p_l(next token)``; an example's last token has
  no next token and is left out);
- **accuracy**: how often the top-1 token is the next token;
- **agreement**: how often the top-1 token is the final layer's;
- **prediction depth** (per token): the first scored layer from which every later scored layer's top-1 token is the
  final layer's (Belrose et al. 2023 §5; Baldock et al. 2021 for examples), counted per layer.

Several lenses are scored in one pass over the split (:func:`score_lenses`): the states are read once and the final
distribution computed once per block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.devices import DEFAULT_DEVICE, resolve_device
from ..core.option_specs import check_options
from ..core.threads import computes
from ..store.lens import LensWeights
from ..store.reader import LayerCache
from .lens_options import LOGITS_DTYPES, LensOptions
from .lens_tokens import LOGIT_BUFFERS, LensInputs, checked_rows, token_blocks

DEFAULT_CHUNK_BYTES = 1 << 28
"""Float32 bytes of states and of logits held at once (each): 256 MiB."""
_WEIGHT_BLOCK_BYTES = 1 << 26  # a bfloat16/float16 unembedding is cast to float32 this many bytes of it at a time

Translator = Callable[[int, torch.Tensor], torch.Tensor]
"""``(kept state position, states (n, D) float32) -> translated states (n, D)``."""


@dataclass(frozen=True)
class LensMap:
    """What a lens does to a state before the unembedding (see :func:`score_lenses`; None: nothing, the logit lens)."""

    translate: Translator
    normed: bool = False
    """The translated states are in the final norm's output space (a map onto a ``layer_L`` stored after the norm):
    read straight through the unembedding."""


@dataclass(frozen=True)
class LensScores:
    """Per-layer scores of one lens over the tokens of one split (see the module for each)."""

    lens: str
    """Which lens: ``logit``, ``tuned`` or ``linear``."""
    split: str
    layer_names: tuple[str, ...]
    """(S,) the states scored, in the order asked (prediction depth reads it as the order of depth)."""
    kl: np.ndarray
    """(S,) float64 nats per token."""
    cross_entropy: np.ndarray
    """(S,) float64 bits per predicted token."""
    accuracy: np.ndarray
    """(S,) float64 top-1 next-token accuracy."""
    agreement: np.ndarray
    """(S,) float64 share of tokens whose top-1 token is the final layer's."""
    depth_counts: np.ndarray
    """(S,) int64 tokens whose prediction depth is each scored state."""
    n_tokens: int
    n_predictions: int
    """Tokens with a next token in their example: what ``cross_entropy`` and ``accuracy`` average over."""

    @property
    def mean_depth(self) -> float:
        """The tokens' mean prediction depth, as an index into :attr:`layer_names` (NaN with no token)."""
        total = int(self.depth_counts.sum())
        return float(np.arange(len(self.depth_counts)) @ self.depth_counts / total) if total else math.nan

    def to_json(self) -> dict[str, Any]:
        """The scores as plain JSON values (``report.json``)."""
        return {"lens": self.lens, "split": self.split, "layer_names": list(self.layer_names),
                "kl": self.kl.tolist(), "cross_entropy_bits": self.cross_entropy.tolist(),
                "accuracy": self.accuracy.tolist(), "agreement": self.agreement.tolist(),
                "depth_counts": self.depth_counts.tolist(), "mean_depth": self.mean_depth,
                "n_tokens": self.n_tokens, "n_predictions": self.n_predictions}


@computes
def lens_logits(states: torch.Tensor | np.ndarray, lens: LensWeights, *, normed: bool = False,
                logits_dtype: str = "float32") -> torch.Tensor:
    """(n, V) float32 logits of states (n, D) through the final norm (skipped when ``normed``) and the unembedding.

    ``normed`` is for states that come out of the final norm already (a ``layer_L`` stored after
    it: ``lens.normed_last``). The head's bias, ``logit_scale`` and ``logit_softcap`` follow the matmul.
    ``logits_dtype="bfloat16"`` runs the matmul alone in bfloat16 (the normed state and the unembedding rounded to
    it, the logits cast back to float32: :func:`on_device` casts a lens's unembedding once). Differentiable in
    ``states`` (a tuned lens trains through it).
    """
    if logits_dtype not in LOGITS_DTYPES:
        check_options(LensOptions, {"logits_dtype": logits_dtype})  # its one-sentence refusal
    h = torch.as_tensor(states).float()  # (n, D)
    if not normed:
        h = lens.norm(h)
    weight = lens.unembedding  # (V, D)
    if logits_dtype == "bfloat16":  # the bfloat16 rate; softmax and KL read float32 logits (cast up here)
        logits = (h.to(torch.bfloat16) @ weight.to(torch.bfloat16).T).float()  # (n, V)
    elif weight.dtype == torch.float32:
        logits = h @ weight.T  # (n, V)
    else:  # a half-precision head is cast a block of rows at a time, never as a whole float32 copy
        step = max(1, _WEIGHT_BLOCK_BYTES // (weight.shape[1] * 4))
        blocks = range(0, weight.shape[0], step)
        if torch.is_grad_enabled() and h.requires_grad:  # joined, so that autograd sees one result
            logits = torch.cat([h @ weight[v:v + step].float().T for v in blocks], dim=1)
        else:  # filled in place: no second (n, V) copy
            logits = torch.empty(len(h), weight.shape[0], device=h.device)  # (n, V)
            for v in blocks:
                logits[:, v:v + step] = h @ weight[v:v + step].float().T
    if lens.unembedding_bias is not None:
        logits = logits + lens.unembedding_bias.float()
    if lens.logit_scale != 1.0:
        logits = logits * lens.logit_scale
    if lens.logit_softcap is not None:
        logits = lens.logit_softcap * torch.tanh(logits / lens.logit_softcap)
    return logits


def on_device(lens: LensWeights, device: torch.device, logits_dtype: str = "float32") -> LensWeights:
    """The lens weights with their tensors on ``device``, the unembedding cast once to bfloat16 for
    ``logits_dtype="bfloat16"`` (else as stored); the same object on the CPU in float32."""
    unembedding = lens.unembedding.to(device)  # (V, D)
    if logits_dtype == "bfloat16":
        unembedding = unembedding.to(torch.bfloat16)
    if device.type == "cpu" and unembedding is lens.unembedding:
        return lens
    norm = lens.norm
    moved = replace(norm, **{k: getattr(norm, k).to(device) for k in ("weight", "bias")
                             if getattr(norm, k) is not None})
    bias = None if lens.unembedding_bias is None else lens.unembedding_bias.to(device)
    return replace(lens, norm=moved, unembedding=unembedding, unembedding_bias=bias)


def score_lenses(cache: LayerCache, split: str, inputs: LensInputs, lenses: Mapping[str, LensMap | None], *,
                 rows: Sequence[int] | np.ndarray | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 device: str | torch.device = DEFAULT_DEVICE, logits_dtype: str = "float32") -> dict[str, LensScores]:
    """Score every lens of ``lenses`` (name -> its :class:`LensMap`, None for the logit lens) on the states
    ``inputs.positions`` of ``split`` (``rows``: cache rows, default all), in one pass; ``chunk_bytes``: float32
    bytes of states, and of logits, held at once. The logits are computed on ``device`` (a lens map's translator
    takes states there) with their matmul in ``logits_dtype``; the sums stay there until the end."""
    rows = checked_rows(cache, split, rows)
    device = resolve_device(device) if isinstance(device, str) else device
    lens, positions, final_position = on_device(inputs.lens, device, logits_dtype), inputs.positions, \
        inputs.final_position
    block_tokens = max(1, chunk_bytes // (LOGIT_BUFFERS * lens.vocab_size * 4))
    S = len(positions)
    # (4, S) float64 per lens: summed KL, bits, correct and agreeing tokens (float64 on the device: no sync per layer)
    sums = {name: torch.zeros(4, S, dtype=torch.float64, device=device) for name in lenses}
    depth = {name: torch.zeros(S, dtype=torch.int64, device=device) for name in lenses}  # (S,) tokens settled there
    n_tokens = n_predictions = 0
    with torch.no_grad():
        for block, target in token_blocks(cache, split, rows, inputs.read, chunk_bytes=chunk_bytes,
                                          block_tokens=block_tokens):  # (b, R, D), (b,)
            block, target = block.to(device), target.to(device)
            valid = ((target >= 0) & (target < lens.vocab_size)).nonzero().squeeze(1)  # (p,) tokens with a target
            next_ids = target[valid]  # (p,)
            final_logits = lens_logits(block[:, inputs.at(final_position)], lens, normed=lens.normed_last,
                                       logits_dtype=logits_dtype)  # (b, V)
            final_logp = F.log_softmax(final_logits, dim=-1)  # (b, V)
            final_top = final_logits.argmax(-1)  # (b,)
            del final_logits
            for name, lens_map in lenses.items():
                s = sums[name]
                agrees = torch.zeros(len(block), S, dtype=torch.bool, device=device)  # (b, S) top-1 is the final's
                for j, p in enumerate(positions):
                    if p == final_position:
                        logp, top = final_logp, final_top
                    else:
                        h = block[:, inputs.at(p)]  # (b, D)
                        if lens_map is not None:
                            h = lens_map.translate(p, h)
                        logits = lens_logits(h, lens, normed=lens_map is not None and lens_map.normed,
                                             logits_dtype=logits_dtype)  # (b, V)
                        logp = F.log_softmax(logits, dim=-1)  # (b, V)
                        top = logits.argmax(-1)  # (b,)
                        del logits
                        s[0, j] += F.kl_div(logp, final_logp, reduction="sum", log_target=True)
                    s[1, j] -= logp[valid, next_ids].sum().double() / math.log(2)  # float64, as the sums
                    s[2, j] += (top[valid] == next_ids).sum()
                    agrees[:, j] = top == final_top
                    s[3, j] += agrees[:, j].sum()
                    del logp
                depth[name] += torch.bincount(_settled_at(agrees), minlength=S)[:S]
            n_tokens += len(block)
            n_predictions += len(valid)
    out = {}
    for name, on_device_sums in sums.items():
        kl, bits, correct, agree = on_device_sums.cpu().numpy()  # (S,) each
        out[name] = LensScores(lens=name, split=split, layer_names=tuple(cache.layer_names[p] for p in positions),
                               kl=_mean(kl, n_tokens), cross_entropy=_mean(bits, n_predictions),
                               accuracy=_mean(correct, n_predictions), agreement=_mean(agree, n_tokens),
                               depth_counts=depth[name].cpu().numpy(), n_tokens=n_tokens, n_predictions=n_predictions)
    return out


def prediction_depths(agrees: torch.Tensor) -> np.ndarray:
    """(b,) int64: for each token, the first column of ``agrees`` (b, S) from which every later column is True, or
    S - 1 when the last column itself disagrees (that token's prediction settles only at the end)."""
    return _settled_at(agrees).cpu().numpy()


def _settled_at(agrees: torch.Tensor) -> torch.Tensor:
    """:func:`prediction_depths` on ``agrees``' device: (b,) int64."""
    S = agrees.shape[1]
    # the length of the run of True at the end of each row: reversed, cumulative product, summed
    settled = torch.cumprod(agrees.flip(1).to(torch.int64), dim=1).sum(1)  # (b,)
    return (S - settled).clamp(max=S - 1)


def _mean(sums: np.ndarray, count: int) -> np.ndarray:
    """(S,) sums / count, NaN when there was nothing to average."""
    return sums / count if count else np.full(len(sums), np.nan)
