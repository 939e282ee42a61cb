"""The logit lens (nostalgebraist 2020): every layer of a decoder read through the model's own output head.

For each kept state ``h_l`` of a token, ``logits_l = W_U · final_norm(h_l)`` (plus the head's bias,
scale and soft-cap where the model has them) is the next-token distribution that layer would give
if the remaining blocks were skipped. Per layer, over the tokens of a split:

- **accuracy**: how often the top-1 token of ``logits_l`` at position ``t`` is the token cached at
  ``t + 1`` of the same example (the last token of each example has no target);
- **KL**: the mean of ``KL(p_L || p_l)`` in nats, ``p_L`` the final layer's distribution (the
  model's own output), ``p_l`` the layer's;
- **agreement**: how often the layer's top-1 token is the final layer's.

The final norm and the unembedding come from the cache (``lens.safetensors``, written at extraction
for decoders, :mod:`layercache.store.lens`), never from a model. A ``layer_L`` stored after the
final norm (``final_norm: applied``) goes straight to the unembedding. Logits are computed in
float32 (or their matmul in bfloat16: ``logits_dtype``) on ``device``, a block of tokens at a time, so memory stays
bounded (``chunk_bytes``) for any vocabulary.

    lens = logit_lens(cache, "validation")
    lens.accuracy        # (S,) per kept state, the last equals the model's next-token accuracy
    lens.kl              # (S,) nats, 0 at the last layer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.devices import DEFAULT_DEVICE, resolve_device
from ..core.layers import LayerSpec
from ..core.option_specs import check_options
from ..core.threads import computes
from ..errors import ConfigError
from ..store.reader import LayerCache
from .lens_options import LensOptions
from .lens_scores import DEFAULT_CHUNK_BYTES, lens_logits, score_lenses
from .lens_tokens import lens_inputs, model_space

_D = LensOptions()  # the logits dtype's default is declared there

__all__ = ["LogitLens", "logit_lens", "layer_logits", "lens_logits", "DEFAULT_CHUNK_BYTES"]


@dataclass(frozen=True)
class LogitLens:
    """Per-layer logit-lens scores over the tokens of one split, from :func:`logit_lens`.

    Attributes:
        split: the split read.
        layer_names: (S,) names of the states scored, in the order asked.
        accuracy: (S,) float64, top-1 next-token accuracy of each state's lens distribution.
        kl: (S,) float64, mean ``KL(final || state)`` in nats per token (0 for ``layer_L`` itself).
        agreement: (S,) float64, fraction of tokens whose top-1 token is the final layer's.
        n_tokens: tokens averaged over for ``kl`` and ``agreement``.
        n_predictions: tokens with a next token in their example, averaged over for ``accuracy``.
    """

    split: str
    layer_names: tuple[str, ...]
    accuracy: np.ndarray
    kl: np.ndarray
    agreement: np.ndarray
    n_tokens: int
    n_predictions: int


@computes
def layer_logits(cache: LayerCache, split: str, rows: Sequence[int], layer: LayerSpec = -1) -> list[np.ndarray]:
    """The lens logits of one kept state for the given rows: one float32 array (t_i, V) per row.

    ``layer`` is a state name or index among the kept states (``-1``: the last); the final norm is
    not applied again to a ``layer_L`` stored after it.
    """
    inputs = lens_inputs(cache, layer, require_final=False)
    (position,) = inputs.positions
    per_row = cache.tokens(split, rows, [position])  # (t_i, 1, D) each
    return [lens_logits(model_space(cache, h, [position])[:, 0], inputs.lens, normed=inputs.normed(position)).numpy()
            for h in per_row]


@computes
def logit_lens(cache: LayerCache, split: str | None = None, *, layers: LayerSpec | Sequence[LayerSpec] | None = None,
               rows: Sequence[int] | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
               device: str = DEFAULT_DEVICE, logits_dtype: str = _D.logits_dtype) -> LogitLens:
    """Score every kept state (or ``layers``) of a decoder cache with the logit lens on ``split``.

    Args:
        cache: an open :class:`~layercache.store.reader.LayerCache` of a decoder, with token states,
            lens weights, and ``layer_L`` among its kept states (the reference distribution).
        split: the split to read; default the cache's validation split, else its first.
        layers: which kept states to score (names or indices, default all), in the order given.
        rows: which examples (cache rows) to read, default all; a random subset keeps a large
            split cheap.
        chunk_bytes: float32 bytes of states, and of logits, held at once.
        device: where the logits are computed: ``auto`` (a GPU when torch sees one), ``cpu`` or ``cuda[:N]``.
        logits_dtype: the logits' matmul in ``float32`` or ``bfloat16`` (the softmax and the KL in float32; see
            :data:`~.lens_options.LOGITS_DTYPES`).

    Refuses an encoder cache, a cache without lens weights or token states, and one that does not
    keep ``layer_L``.
    """
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes must be positive, got {chunk_bytes}.")
    check_options(LensOptions, {"logits_dtype": logits_dtype})
    target = resolve_device(device)  # refused before the cache is read
    split = cache.report_split(split, fallback=cache.splits[0])
    scores = score_lenses(cache, split, lens_inputs(cache, layers), {"logit": None}, rows=rows,
                          chunk_bytes=chunk_bytes, device=target, logits_dtype=logits_dtype)["logit"]
    return LogitLens(split=split, layer_names=scores.layer_names, accuracy=scores.accuracy, kl=scores.kl,
                     agreement=scores.agreement, n_tokens=scores.n_tokens, n_predictions=scores.n_predictions)
