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
float32, a block of tokens at a time, so memory stays bounded (``chunk_bytes``) for any vocabulary.

    lens = logit_lens(cache, "validation")
    lens.accuracy        # (S,) per kept state, the last equals the model's next-token accuracy
    lens.kl              # (S,) nats, 0 at the last layer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.layers import LayerSpec
from ..core.option_names import option
from ..core.threads import computes
from ..errors import CacheError, ConfigError
from ..store.lens import LensWeights
from ..store.reader import LayerCache

DEFAULT_CHUNK_BYTES = 1 << 28
"""Float32 bytes of states and of logits held at once (each): 256 MiB."""
_LOGIT_BUFFERS = 5  # (n, V) float32 arrays alive at once: final log-probs, a layer's logits and log-probs, temporaries
_WEIGHT_BLOCK_BYTES = 1 << 26  # a bfloat16/float16 unembedding is cast to float32 this many bytes of it at a time


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
def lens_logits(states: torch.Tensor | np.ndarray, lens: LensWeights, *, normed: bool = False) -> torch.Tensor:
    """(n, V) float32 logits of states (n, D) through the final norm (skipped when ``normed``) and the unembedding.

    ``normed`` is for states that come out of the final norm already (a ``layer_L`` stored after
    it: ``lens.normed_last``). The head's bias, ``logit_scale`` and ``logit_softcap`` follow the matmul.
    """
    h = torch.as_tensor(states).float()  # (n, D)
    if not normed:
        h = lens.norm(h)
    weight = lens.unembedding  # (V, D)
    if weight.dtype == torch.float32:
        logits = h @ weight.T  # (n, V)
    else:  # a half-precision head is cast a block of rows at a time, never as a whole float32 copy
        logits = torch.empty(len(h), weight.shape[0])  # (n, V)
        step = max(1, _WEIGHT_BLOCK_BYTES // (weight.shape[1] * 4))
        for v in range(0, weight.shape[0], step):
            logits[:, v:v + step] = h @ weight[v:v + step].float().T
    if lens.unembedding_bias is not None:
        logits = logits + lens.unembedding_bias.float()
    if lens.logit_scale != 1.0:
        logits = logits * lens.logit_scale
    if lens.logit_softcap is not None:
        logits = lens.logit_softcap * torch.tanh(logits / lens.logit_softcap)
    return logits


@computes
def layer_logits(cache: LayerCache, split: str, rows: Sequence[int], layer: LayerSpec = -1) -> list[np.ndarray]:
    """The lens logits of one kept state for the given rows: one float32 array (t_i, V) per row.

    ``layer`` is a state name or index among the kept states (``-1``: the last); the final norm is
    not applied again to a ``layer_L`` stored after it.
    """
    lens, final = _lens_and_final(cache)
    (position,) = cache.layer_index(layer)
    normed = cache.manifest.storage.layers[position] == final and lens.normed_last
    per_row = cache.tokens(split, rows, [position])  # (t_i, 1, D) each
    return [lens_logits(_model_space(cache, h, [position])[:, 0], lens, normed=normed).numpy() for h in per_row]


@computes
def logit_lens(cache: LayerCache, split: str | None = None, *, layers: LayerSpec | Sequence[LayerSpec] | None = None,
               rows: Sequence[int] | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> LogitLens:
    """Score every kept state (or ``layers``) of a decoder cache with the logit lens on ``split``.

    Args:
        cache: an open :class:`~layercache.store.reader.LayerCache` of a decoder, with token states,
            lens weights, and ``layer_L`` among its kept states (the reference distribution).
        split: the split to read; default the cache's validation split, else its first.
        layers: which kept states to score (names or indices, default all), in the order given.
        rows: which examples (cache rows) to read, default all; a random subset keeps a large
            split cheap.
        chunk_bytes: float32 bytes of states, and of logits, held at once.

    Refuses an encoder cache, a cache without lens weights or token states, and one that does not
    keep ``layer_L``.
    """
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes must be positive, got {chunk_bytes}.")
    split = cache.report_split(split, fallback=cache.splits[0])
    cache.require_tokens()
    lens, final = _lens_and_final(cache)
    kept = list(cache.manifest.storage.layers)  # model state index of each kept state
    positions = cache.layer_index(layers)  # (S,) among the kept states
    if final not in kept:
        raise ConfigError(f"The logit lens compares each layer with the model's output, layer_{final}, which this "
                          "cache does not keep; re-extract it keeping the last layer (e.g. without "
                          f"{option('layers')}).")
    final_position = kept.index(final)
    read = sorted({*positions, final_position})  # states read from the shards
    at = {p: i for i, p in enumerate(read)}
    n = cache.num_examples(split)
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)  # (r,)
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        raise ConfigError(f"rows must be cache rows of split {split!r}, from 0 to {n - 1}; got {rows.min()} to "
                          f"{rows.max()}.")
    lengths = cache.lengths(split)  # (n,)
    all_ids, starts = _split_ids(cache, split)  # (t,), (n,)

    V, D = lens.vocab_size, cache.manifest.model.hidden_size
    read_tokens = max(1, chunk_bytes // (len(read) * D * 4))
    logit_tokens = max(1, chunk_bytes // (_LOGIT_BUFFERS * V * 4))
    kl = np.zeros(len(positions))  # (S,) sums
    correct = np.zeros(len(positions))
    agree = np.zeros(len(positions))
    n_tokens = n_predictions = 0
    for group in _row_groups(rows, lengths, read_tokens):
        states = _model_space(cache, np.concatenate(cache.tokens(split, group, read)), read)  # (t, R, D) float32
        targets = np.concatenate([_next_tokens(all_ids[starts[r]:starts[r] + lengths[r]]) for r in group])  # (t,)
        for a in range(0, len(states), logit_tokens):
            block = torch.from_numpy(states[a:a + logit_tokens])  # (b, R, D)
            target = torch.from_numpy(targets[a:a + logit_tokens])  # (b,), -1 where none
            valid = (target >= 0) & (target < V)  # (b,)
            final_logits = lens_logits(block[:, at[final_position]], lens, normed=lens.normed_last)  # (b, V)
            final_logp = F.log_softmax(final_logits, dim=-1)  # (b, V)
            final_top = final_logits.argmax(-1)  # (b,)
            del final_logits
            for j, p in enumerate(positions):
                if p == final_position:
                    logits, logp = None, final_logp
                    top = final_top
                else:
                    logits = lens_logits(block[:, at[p]], lens, normed=False)  # (b, V)
                    logp = F.log_softmax(logits, dim=-1)  # (b, V)
                    top = logits.argmax(-1)  # (b,)
                    kl[j] += float(F.kl_div(logp, final_logp, reduction="sum", log_target=True))
                correct[j] += int((top[valid] == target[valid]).sum())
                agree[j] += int((top == final_top).sum())
                del logits, logp
            n_tokens += len(block)
            n_predictions += int(valid.sum())
    return LogitLens(split=split, layer_names=tuple(cache.layer_names[p] for p in positions),
                     accuracy=_mean(correct, n_predictions), kl=_mean(kl, n_tokens), agreement=_mean(agree, n_tokens),
                     n_tokens=n_tokens, n_predictions=n_predictions)


def _mean(sums: np.ndarray, count: int) -> np.ndarray:
    """(S,) sums / count, NaN when there was nothing to average."""
    return sums / count if count else np.full(len(sums), np.nan)


def _model_space(cache: LayerCache, states: np.ndarray, read: list[int]) -> np.ndarray:
    """Stored states ``(t, R, W)`` of kept states ``read`` in the model's space ``(t, R, D)``: as they are, or for a
    projected cache mapped back through its basis (``mu + W^T z``: the lens then sees the variance it kept)."""
    projection = cache.projection()
    if projection is None:
        return states
    return projection.subset(list(read)).reconstruct(torch.from_numpy(states)).numpy()


def _lens_and_final(cache: LayerCache) -> tuple[LensWeights, int]:
    """The cache's lens weights and the model's index of ``layer_L``; refuses an encoder cache first."""
    model = cache.manifest.model
    if model.kind != "decoder":
        raise ConfigError(f"The logit lens reads layers through a decoder's next-token head, and this cache is of an "
                          f"{model.kind} ({model.name}); extract a decoder to use it.")
    lens = cache.lens_weights()
    if cache.manifest.storage.final_norm == "applied" and not lens.normed_last:
        raise CacheError(f"The lens weights of {cache.path} disagree with its manifest about whether layer_L is "
                         "stored after the final norm; run the same `layercache extract` command again.")
    return lens, model.n_layers


def _split_ids(cache: LayerCache, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Every token id of the split in cache order (t,), and where each row starts in it (n,)."""
    parts = [cache.shard_dataset(split, s, "input_ids")[:] for s in range(len(cache.split_info(split).shards))]
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int32)  # (t,)
    lengths = cache.lengths(split)  # (n,)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    return ids, starts


def _next_tokens(ids: np.ndarray) -> np.ndarray:
    """(t,) the id at the next position of the same example, -1 at its last position."""
    out = np.full(len(ids), -1, dtype=np.int64)  # (t,)
    out[:-1] = ids[1:]
    return out


def _row_groups(rows: np.ndarray, lengths: np.ndarray, tokens: int) -> list[np.ndarray]:
    """``rows`` cut into consecutive groups of at most ``tokens`` tokens (a longer row alone)."""
    groups, current, count = [], [], 0
    for r in rows:
        n = int(lengths[r])
        if current and count + n > tokens:
            groups.append(np.array(current))
            current, count = [], 0
        current.append(int(r))
        count += n
    if current:
        groups.append(np.array(current))
    return groups
