"""One batch through the frozen backbone: padded forward, then what a shard stores of it.

Everything after the forward pass stays in torch on the model's device until the cast to the
storage dtype (see :mod:`.packing`), so a GPU run copies to the host only the real tokens of the
kept states.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..backbone.loader import Backbone
from ..core.option_names import option, options
from ..errors import NonFiniteStatesError
from ..sources.records import LabelTask, SplitRecords
from ..store.writer import ExtractedBatch
from .held import HeldBatch
from .packing import NonFiniteStates, StatePacker, StorageBuffer, scales_array, storage_array
from .tokenize import EncodedExample


def pad_windows(examples: Sequence[EncodedExample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, W) input ids and attention mask for every window of the batch, right-padded."""
    windows = [w for ex in examples for w in ex.windows]
    lengths = np.fromiter((len(w) for w in windows), np.int64, len(windows))  # (R,)
    real = np.arange(lengths.max()) < lengths[:, None]  # (R, W)
    ids = np.full(real.shape, pad_id, np.int64)  # (R, W)
    ids[real] = np.concatenate(windows)  # boolean assignment is row-major: window after window
    return torch.from_numpy(ids), torch.from_numpy(real.astype(np.int64))


def token_index(examples: Sequence[EncodedExample], mask: torch.Tensor) -> torch.Tensor:
    """(t,) position in the flattened (R * W) padded batch of every stored token, example after example.

    Without windows that is every real position of the mask; a windowed example takes each
    token from the window its ``take`` map names.
    """
    width = mask.shape[1]
    if all(ex.take is None for ex in examples):
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    parts, row = [], 0
    for ex in examples:
        if ex.take is None:
            parts.append(row * width + np.arange(ex.n_tokens))
        else:
            parts.append((row + ex.take[:, 0].astype(np.int64)) * width + ex.take[:, 1])
        row += ex.n_rows
    return torch.from_numpy(np.concatenate(parts))


def pool(flat: torch.Tensor, lengths: torch.Tensor, modes: Sequence[str],
         mean_skip_first: bool = False) -> dict[str, torch.Tensor]:
    """Mask-aware pooling from unpadded tokens (t, S, D): mode -> (b, S, D). Padding never enters a mean.

    ``mean_skip_first``: the mean leaves out each example's first token unless it is the only one.
    The reference definition; extraction computes the same values chunk by chunk in
    :class:`.packing.StatePacker`.
    """
    ends = torch.cumsum(lengths, 0)  # (b,)
    starts = ends - lengths
    out = {}
    if "mean" in modes:
        segment = torch.repeat_interleave(torch.arange(len(lengths), device=flat.device), lengths)  # (t,)
        keep = torch.ones(len(flat), dtype=torch.bool, device=flat.device)  # (t,) tokens that enter the mean
        if mean_skip_first:
            keep[starts[lengths > 1]] = False
        sums = torch.zeros((len(lengths),) + flat.shape[1:], dtype=flat.dtype, device=flat.device)
        sums.index_add_(0, segment[keep], flat[keep])  # (b, S, D)
        counts = torch.zeros_like(lengths).index_add_(0, segment[keep], torch.ones_like(segment[keep]))  # (b,)
        out["mean"] = sums / counts.to(flat.dtype)[:, None, None]
    if "first" in modes:
        out["first"] = flat[starts]
    if "last" in modes:
        out["last"] = flat[ends - 1]
    return out


def run_batch(backbone: Backbone, examples: Sequence[EncodedExample], records: SplitRecords, *,
              keep: Sequence[int], tasks: Sequence[LabelTask], packer: StatePacker,
              out: StorageBuffer | None, split: str | None = None, first_row: int | None = None,
              hidden: HeldBatch | None = None) -> ExtractedBatch:
    """Forward one planned batch and return it unpadded, pooled and cast, ready for a shard.

    ``out``: a host buffer with room for the batch's T >= t tokens, which receives the token states
    (and a scaled codec's scales; the returned batch's ``hidden`` is a view of it); None stores
    pooled only. A NaN or inf among the states raises :class:`~layercache.errors.NonFiniteStatesError`,
    whose sentence names ``split`` and the cache row (``first_row``: the batch's first) when given.
    ``hidden``: this batch's kept states from an earlier forward pass (the storage-dtype probe's or
    the projection fit's, :mod:`.held`), already cut to its stored tokens, so the model does not run twice.
    """
    device = packer.device  # a split model's states lie on several devices; the packer gathers them here
    lengths_np = np.fromiter((ex.n_tokens for ex in examples), np.int64, len(examples))  # (b,)
    n_tokens = int(lengths_np.sum())
    if hidden is None:
        ids, mask = pad_windows(examples, backbone.tokenizer.pad_token_id)
        states = backbone.hidden_states(ids, mask)  # L+1 x (R, W, D)
        index = token_index(examples, mask).to(device)  # (t,) stored tokens in the flattened (R * W) rows
    else:
        states = hidden.states  # L+1 x (t, D) kept, None otherwise: the stored tokens already, in order
        index = torch.arange(n_tokens, device=device)  # (t,)
    tokens = None if out is None else out.head(n_tokens)  # (S, t, W) values, (S, t, scales width) scales
    try:
        packed = packer.pack(states, keep, index, torch.from_numpy(lengths_np).to(device),
                             None if tokens is None else tokens.values, None if tokens is None else tokens.scales)
    except NonFiniteStates as bad:
        raise _non_finite_error(bad, backbone, examples, records, keep, split, first_row) from None
    word_ids = None
    if all(ex.word_ids is not None for ex in examples):
        word_ids = np.concatenate([ex.word_ids for ex in examples])
    return ExtractedBatch(
        hidden=None if tokens is None else storage_array(tokens.values, packer.storage_dtype),
        hidden_scales=None if tokens is None else scales_array(tokens.scales, packer.storage_dtype),
        lengths=lengths_np,
        input_ids=np.concatenate([ex.stitched_ids() for ex in examples]).astype(np.int32, copy=False),
        word_ids=word_ids,
        pooled=packed.pooled,
        pooled_scales=packed.pooled_scales,
        labels={task.name: [records.labels[task.name][ex.row] for ex in examples] for task in tasks},
        example_index=np.array([records.source_index[ex.row] for ex in examples], np.int64),
        stat_sum=packed.stat_sum,
        stat_sumsq=packed.stat_sumsq,
        stat_count=n_tokens,
        overflow=packed.overflow,
    )


def _non_finite_error(bad: NonFiniteStates, backbone: Backbone, examples: Sequence[EncodedExample],
                      records: SplitRecords, keep: Sequence[int], split: str | None,
                      first_row: int | None) -> NonFiniteStatesError:
    """One sentence naming where the model produced a NaN or inf, and what to do about it."""
    what = "NaN" if math.isnan(bad.value) else ("-inf" if bad.value < 0 else "inf")
    layer = backbone.layer_names[keep[bad.state]]
    where = f"source row {records.source_index[examples[bad.example].row]}"
    if split is not None:
        where += f" of split {split!r}"
    if first_row is not None:
        where += f" (cache row {first_row + bad.example})"
    if backbone.dtype in (torch.float16, torch.bfloat16):
        fix = (f"a {str(backbone.dtype).replace('torch.', '')} forward pass can overflow inside the model, so "
               f"re-extract with {options(dtype='float32', overwrite=True)}")
    else:
        fix = ("check the model's weights, or leave that example out of the data and re-extract with "
               f"{option('overwrite', True)}")
    return NonFiniteStatesError(f"The model produced {what} in state {layer} for {where}; {fix}.")
