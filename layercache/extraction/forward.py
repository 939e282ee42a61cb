"""One batch through the frozen backbone: padded forward, then unpadding, stitching, pooling.

Everything after the forward pass stays in torch on the model's device until the final cast to
the storage dtype, so a GPU run copies to the host only the real tokens of the kept states.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..sources.backbone import Backbone
from ..sources.records import LabelTask, SplitRecords
from ..store.dtypes import FP16_MAX, to_storage
from ..store.writer import ExtractedBatch
from .tokenize import EncodedExample

POOLING_MODES = ("mean", "first", "last")


def pad_windows(examples: Sequence[EncodedExample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, W) input ids and attention mask for every window of the batch, right-padded."""
    windows = [w for ex in examples for w in ex.windows]
    width = max(len(w) for w in windows)
    ids = torch.full((len(windows), width), pad_id, dtype=torch.long)  # (R, W)
    mask = torch.zeros((len(windows), width), dtype=torch.long)  # (R, W)
    for r, w in enumerate(windows):
        ids[r, : len(w)] = torch.tensor(w, dtype=torch.long)
        mask[r, : len(w)] = 1
    return ids, mask


def unpad(hidden: Sequence[torch.Tensor], keep: Sequence[int], mask: torch.Tensor,
          examples: Sequence[EncodedExample]) -> torch.Tensor:
    """Real tokens of every example, back to back: kept states of (R, W, D) -> (t, S, D).

    Each state is unpadded before stacking, so padding is never copied.
    """
    if all(ex.take is None for ex in examples):
        real = mask.bool()
        return torch.stack([hidden[i][real] for i in keep], dim=1)  # row-major: example by example
    rows, positions, row = [], [], 0
    for ex in examples:
        if ex.take is None:
            n = len(ex.windows[0])
            rows.append(torch.full((n,), row))
            positions.append(torch.arange(n))
        else:
            take = torch.as_tensor(ex.take, dtype=torch.long)
            rows.append(row + take[:, 0])
            positions.append(take[:, 1])
        row += ex.n_rows
    r = torch.cat(rows).to(mask.device)
    p = torch.cat(positions).to(mask.device)
    return torch.stack([hidden[i][r, p] for i in keep], dim=1)


def pool(flat: torch.Tensor, lengths: torch.Tensor, modes: Sequence[str]) -> dict[str, torch.Tensor]:
    """Mask-aware pooling from unpadded tokens: mode -> (b, S, D). Padding never enters a mean."""
    ends = torch.cumsum(lengths, 0)  # (b,)
    starts = ends - lengths
    out = {}
    if "mean" in modes:
        segment = torch.repeat_interleave(torch.arange(len(lengths), device=flat.device), lengths)  # (t,)
        sums = torch.zeros((len(lengths),) + flat.shape[1:], dtype=flat.dtype, device=flat.device)
        sums.index_add_(0, segment, flat)  # (b, S, D)
        out["mean"] = sums / lengths.to(flat.dtype)[:, None, None]
    if "first" in modes:
        out["first"] = flat[starts]
    if "last" in modes:
        out["last"] = flat[ends - 1]
    return out


def run_batch(backbone: Backbone, examples: Sequence[EncodedExample], records: SplitRecords, *,
              keep: Sequence[int], tasks: Sequence[LabelTask], storage_dtype: str, store_tokens: bool,
              pooling: Sequence[str]) -> ExtractedBatch:
    """Forward one planned batch and return it unpadded, pooled and cast, ready for a shard."""
    ids, mask = pad_windows(examples, backbone.tokenizer.pad_token_id)
    hidden = backbone.hidden_states(ids, mask)  # L+1 x (R, W, D)
    flat = unpad(hidden, keep, mask.to(hidden[0].device), examples).float()  # (t, S, D)
    lengths = torch.tensor([ex.n_tokens for ex in examples], device=flat.device)  # (b,)
    pooled = pool(flat, lengths, pooling)
    # Per-batch sums in fp32 over chunks of tokens are exact enough and cache-friendly (a chunk's
    # squares fit in cache; vector_norm over the whole batch measured ~10x slower). The shard
    # accumulates them in float64.
    stat_sum = flat.sum(0)  # (S, D)
    stat_sumsq = torch.zeros(flat.shape[1:], dtype=torch.float64, device=flat.device)  # (S, D)
    for chunk in flat.split(1024):
        stat_sumsq += (chunk * chunk).sum(0).double()
    overflow = 0
    if storage_dtype == "float16":
        low, high = torch.aminmax(flat)
        if max(-float(low), float(high)) > FP16_MAX:  # rare: count only when something overflows
            overflow = int((flat.abs() > FP16_MAX).sum())
    word_ids = None
    if all(ex.word_ids is not None for ex in examples):
        word_ids = np.concatenate([ex.word_ids for ex in examples])
    batch = ExtractedBatch(
        hidden=to_storage(flat, storage_dtype) if store_tokens else None,
        lengths=lengths.cpu().numpy().astype(np.int64),
        input_ids=np.concatenate([_stitched_ids(ex) for ex in examples]).astype(np.int32),
        word_ids=word_ids,
        pooled={m: to_storage(v, storage_dtype) for m, v in pooled.items()},
        labels={t.name: [records.labels[t.name][ex.row] for ex in examples] for t in tasks},
        example_index=np.array([records.source_index[ex.row] for ex in examples], np.int64),
        stat_sum=stat_sum.double().cpu().numpy(),
        stat_sumsq=stat_sumsq.cpu().numpy(),
        stat_count=int(flat.shape[0]),
        overflow=overflow,
    )
    return batch


def _stitched_ids(ex: EncodedExample) -> np.ndarray:
    if ex.take is None:
        return np.asarray(ex.windows[0])
    return np.array([ex.windows[w][p] for w, p in ex.take])
