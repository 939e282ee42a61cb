"""Turn a padded batch's hidden states into what a shard stores, one kept state at a time.

After the forward pass every kept state is an (R, W, D) tensor with padding. The shard needs the
real tokens back to back in the storage dtype, per-example pooled vectors, per-state sums and
sums of squares, and a count of values beyond the float16 range. Done as whole-batch passes,
that is one fresh (t, S, D) float32 tensor (~90 MB for 8k tokens of a 7 x 384 model, so page
faults on every batch), a stack of temporaries, and six more passes over it. Here each state's
real tokens are gathered into one reused float32 block (t, D), every reduction reads that block
while it is still in cache, the cast writes straight into the caller's storage buffer, and the
block is squared in place last, so no temporary the size of the batch is ever allocated. A
batch costs a few dozen large tensor ops, which matters on a busy machine, where every op of a
multi-threaded torch waits for all its threads to get a core.

Results are the same as the whole-batch computation: the stored states are the same float32
values cast once; each mean pool adds its example's tokens in token order into a float32 sum
exactly as one ``index_add_`` over the batch does. The per-state sums (float64) are combined
from per-example float32 sums instead of one float32 sum over the batch, which changes only
their rounding.

A NaN or inf coming out of the model is caught from the same sums: every value's square goes
into its column's sum of squares, so that sum is non-finite whenever some value is (or, rarely,
when finite squares overflow float32, which the search that follows tells apart). Only then is
the batch searched for the first non-finite value; a healthy batch pays one check of an (S, D)
array.

float16 storage clamps instead of overflowing: a cast writes inf for a finite value beyond +-65,504,
so it counts the stored values beyond the range: the token states (it looks only when a column's
sum of squares allows one, so a healthy batch pays nothing more), or with ``--store pooled`` the
pooled vectors alone (token values that are never stored are not counted). When the count finds
such values the batch's stored tokens are clamped in place, turning those infs into +-FP16_MAX;
pooled vectors are clamped by :meth:`~layercache.store.codecs.StorageCodec.encode`.

A scaled codec (int8, int4) quantises each stored token's state from the same float32 block, on
the forward's device, and writes its scales beside it (``scales``, (S, t, scales_width(D)): one per
vector for int8, one per 32 values for int4); pooled vectors are quantised by the codec's
``encode``. Its scales adapt to every vector, so nothing is clamped or counted. The shapes of the
stored values and scales are the codec's (:meth:`~layercache.store.codecs.StorageCodec.empty`,
``empty_scales``): int4 stores two values a byte.

With a projection (``--project K``, :mod:`layercache.store.projection`) each state's block is
projected to its K coordinates right after the gather, and everything after (the stored values,
pooling, sums, the overflow count) works on those: the shard holds K-wide states and their
statistics. First and last tokens are projected after they are gathered; the mean of projected
tokens is the projection of the mean.

``mean_skip_first`` leaves each example's first stored token out of its mean (a decoder's BOS or
attention sink, whose states can be thousands of times larger than the rest) unless it is the only
one. The first tokens are routed to one extra, discarded row of the per-example sums rather than
subtracted afterwards: subtracting a value of 27,000 from a float32 sum would cancel away the
small values beside it. The per-state sums still add every token, the extra row included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..backbone.placement import tokens_of
from ..store.projection import Projection
from ..store.storage import codec

BLOCK_BYTES = 16 * 2**20
"""Most float32 scratch for one state's tokens; longer batches go through it in several blocks."""


@dataclass
class StorageBuffer:
    """A reused host buffer for one batch's token states, state-major, in the storage form."""

    values: torch.Tensor
    """(S, T, stored width) in the storage precision (the stored width is D but for int4's D / 2)."""
    scales: torch.Tensor | None
    """(S, T, scales width) scales of a scaled codec (int8: one float32 a vector; int4: bfloat16 per 32 values);
    None otherwise."""

    def head(self, n_tokens: int) -> StorageBuffer:
        """Views of the first ``n_tokens`` tokens."""
        return StorageBuffer(self.values[:, :n_tokens], None if self.scales is None else self.scales[:, :n_tokens])


@dataclass
class PackedStates:
    """One batch's states in the form a shard stores them."""

    pooled: dict[str, np.ndarray]
    """mode -> (b, S, D) in storage form."""
    pooled_scales: dict[str, np.ndarray]
    """mode -> (b, S, scales width) scales of a scaled codec, as written to disk; empty otherwise."""
    stat_sum: np.ndarray
    """(S, D) float64 sum over the batch's real tokens."""
    stat_sumsq: np.ndarray
    """(S, D) float64 sum of squares."""
    overflow: int
    """Values beyond the float16 range (0 unless storing float16)."""


class NonFiniteStates(Exception):
    """The model produced a NaN or inf among a batch's stored values (the caller names split and rows)."""

    def __init__(self, state: int, example: int, value: float):
        super().__init__(f"non-finite value {value} in kept state {state}, example {example} of the batch")
        self.state = state
        """Position of the state among the kept ones (the lowest that has one)."""
        self.example = example
        """Position of the example in the batch (the first with one in that state)."""
        self.value = value
        """The first non-finite value found: nan, inf or -inf."""


class StatePacker:
    """Unpads, reduces and casts batches of hidden states; owns a reused float32 scratch block.

    One packer serves one extraction run (one model, one set of kept states), batch after batch.
    """

    def __init__(self, n_states: int, dim: int, *, storage_dtype: str, pooling: Sequence[str],
                 device: torch.device, mean_skip_first: bool = False, projection: Projection | None = None,
                 pooled_dtype: str | None = None):
        self.n_states, self.dim = n_states, dim
        self.projection = None if projection is None else projection.to(device)
        self.out_dim = dim if projection is None else projection.dim  # width of what is stored
        self.storage_dtype = storage_dtype
        self.codec = codec(storage_dtype)
        self.pooled_codec = codec(pooled_dtype or storage_dtype)  # float16 beside int8 / int4 token states
        self.pooling = list(pooling)
        self.mean_skip_first = mean_skip_first
        self.device = torch.device(device)
        self.block_tokens = max(1, BLOCK_BYTES // (4 * dim))
        self._scratch = torch.empty((0, dim), dtype=torch.float32, device=self.device)

    def _block(self, n: int) -> torch.Tensor:
        """(n, D) float32 scratch, grown when needed and then reused."""
        if self._scratch.shape[0] < n:
            self._scratch = torch.empty((n, self.dim), dtype=torch.float32, device=self.device)
        return self._scratch[:n]

    def pack(self, hidden: Sequence[torch.Tensor | None], keep: Sequence[int], index: torch.Tensor,
             lengths: torch.Tensor, out: torch.Tensor | None, scales: torch.Tensor | None = None) -> PackedStates:
        """Pack one batch.

        ``hidden``: every state of the forward pass, (R, W, D) each, or a held batch's (t, D) stored
        tokens with None at the states not kept (:mod:`.held`); each lies on the device that computed it
        or on the host; ``keep``: the S states to store; ``index``: (t,) positions of the stored tokens in
        the flattened (R * W) rows (``arange(t)`` for a held batch),
        example after example; ``lengths``: (b,) stored tokens per example; ``out``: (S, t, W)
        host tensor of the storage dtype that receives the token states, state-major, as
        :class:`~layercache.store.writer.ShardWriter` takes them (W the codec's stored width of D; None:
        pooled only); ``scales``: (S, t, scales width) host tensor for a scaled codec's scales (required
        with ``out`` then; :func:`storage_buffer` makes both).
        """
        S, D = self.n_states, self.out_dim
        if out is not None and self.codec.scaled and scales is None:
            raise ValueError(f"{self.storage_dtype} token states need a tensor for their scales")
        states = [hidden[i].reshape(-1, self.dim) for i in keep]  # S x (R * W, D model), views
        t, b = int(index.shape[0]), int(lengths.shape[0])
        segment = torch.repeat_interleave(torch.arange(b, device=index.device), lengths)  # (t,) example of each token
        counts = lengths  # (b,) tokens in each example's mean
        if self.mean_skip_first:
            skip = lengths > 1  # (b,) a one-token example keeps its token
            segment[(torch.cumsum(lengths, 0) - lengths)[skip]] = b  # first tokens go to the extra row b
            counts = lengths - skip.to(lengths.dtype)
        # (S, b [+ 1], D) per-example sums, and the skipped first tokens' row
        sums = torch.zeros((S, b + self.mean_skip_first, D), dtype=torch.float32, device=self.device)
        sumsq = torch.zeros((S, D), dtype=torch.float64, device=self.device)
        cast_on_device = out is not None and out.device != self.device
        projected_overflow = 0
        for j, state in enumerate(states):
            # A split model's state lies where its block ran: its real tokens are taken there, then moved.
            where = index.to(state.device)  # (t,)
            for start in range(0, t, self.block_tokens):
                stop = min(start + self.block_tokens, t)
                if state.dtype == torch.float32 and state.device == self.device:
                    block = torch.index_select(state, 0, where[start:stop], out=self._block(stop - start))  # (n, D)
                else:  # half precision (index_select cannot widen into its out) or another device: gather, then copy
                    block = self._block(stop - start).copy_(state.index_select(0, where[start:stop]))  # (n, D)
                if self.projection is not None:
                    block = self.projection.state(j, block)  # (n, K): what is stored from here on
                    if self.codec.limit is not None:
                        projected_overflow += int((block.abs() > self.codec.limit).sum())
                sums[j].index_add_(0, segment[start:stop], block)  # adds tokens in order, like one index_add_
                if out is not None and self.codec.scaled:
                    # Quantised where the block is: only the stored bytes and the scales cross the bus.
                    stored, scale = self.codec.quantize(block)  # (n, W), (n, scales width)
                    out[j, start:stop].copy_(stored)
                    scales[j, start:stop].copy_(scale)
                elif out is not None:
                    # Cast on the device first when there is one: only storage-sized values cross the bus.
                    out[j, start:stop].copy_(block.to(out.dtype) if cast_on_device else block)
                # Squared in place, last: a separate product would be one more batch-sized temporary.
                sumsq[j] += block.mul_(block).sum(0)  # float32 per block, float64 across blocks
        stat_sum = sums.sum(1).double()  # (S, D); float32 over <= a few hundred example sums (and skipped tokens)
        pooled = self._pool(states, index, lengths, sums[:, :b], counts)
        stat_sumsq = sumsq.cpu().numpy()  # (S, D)
        if not np.isfinite(stat_sumsq).all():  # some value may be NaN or inf (see the module docstring)
            _raise_non_finite(states, index, lengths)
        # Count what is stored: the token values, or with pooled vectors only (no ``out``) those vectors,
        # which are all a pooled cache clamps. A packer with neither (the storage-dtype probe) counts tokens.
        if out is None and self.pooling:
            overflow = self._pooled_overflow(pooled)
        elif self.projection is not None:
            overflow = projected_overflow
        else:
            overflow = self._overflow(states, index, sumsq)
        if out is not None and self.pooled_codec is not self.codec:  # float16 means beside int8 / int4 tokens
            overflow += self._pooled_overflow(pooled)
        if overflow and out is not None and self.codec.limit is not None:
            # (S, t, D): the cast's infs become +-limit (see the module docstring)
            out.clamp_(-self.codec.limit, self.codec.limit)
        encoded = {m: self.pooled_codec.encode(v) for m, v in pooled.items()}  # mode -> (values, scales or None)
        return PackedStates(pooled={m: values for m, (values, _) in encoded.items()},
                            pooled_scales={m: sc for m, (_, sc) in encoded.items() if sc is not None},
                            stat_sum=stat_sum.cpu().numpy(), stat_sumsq=stat_sumsq, overflow=overflow)

    def _pool(self, states: list[torch.Tensor], index: torch.Tensor, lengths: torch.Tensor,
              sums: torch.Tensor, counts: torch.Tensor) -> dict[str, torch.Tensor]:
        """Mask-aware pooling: mode -> (b, S, D) float32. Padding never enters a mean.

        ``sums``: (S, b, D) per-example sums of the ``counts`` (b,) tokens each mean averages.
        """
        out = {}
        ends = torch.cumsum(lengths, 0)  # (b,)
        if "mean" in self.pooling:
            out["mean"] = (sums / counts.to(sums.dtype)[None, :, None]).transpose(0, 1).contiguous()
        if "first" in self.pooling:
            out["first"] = self._projected(_gather_tokens(states, index[ends - lengths]))
        if "last" in self.pooling:
            out["last"] = self._projected(_gather_tokens(states, index[ends - 1]))
        return out

    def _projected(self, vectors: torch.Tensor) -> torch.Tensor:
        """(b, S, D) gathered model states as stored: projected to (b, S, K) when the cache is."""
        return vectors if self.projection is None else self.projection.apply(vectors)

    def _overflow(self, states: list[torch.Tensor], index: torch.Tensor, sumsq: torch.Tensor) -> int:
        """Values whose magnitude exceeds the codec's limit (stored clamped), counted only when one may.

        Every square is at most its column's sum of squares (float32 rounding is monotone and
        all terms are >= 0), so a value beyond the limit makes some sum exceed its square; only
        then are the values compared one by one.
        """
        limit = self.codec.limit
        if limit is None or not float(sumsq.max()) > limit**2:
            return 0
        return sum(int((tokens_of(state, index).abs() > limit).sum()) for state in states)


    def _pooled_overflow(self, pooled: dict[str, torch.Tensor]) -> int:
        """Values of the pooled vectors beyond their codec's limit (clamped by its ``encode``)."""
        limit = self.pooled_codec.limit
        if limit is None:
            return 0
        return sum(int((vectors.abs() > limit).sum()) for vectors in pooled.values())


def _raise_non_finite(states: list[torch.Tensor], index: torch.Tensor, lengths: torch.Tensor) -> None:
    """Raise :class:`NonFiniteStates` for the lowest state holding a NaN or inf, at its first such token.

    Returns when every value is finite (the sum of squares overflowed on large finite values).
    """
    ends = torch.cumsum(lengths, 0)  # (b,)
    for j, state in enumerate(states):
        values = tokens_of(state, index, index.device)  # (t, D)
        bad = ~torch.isfinite(values)  # (t, D)
        rows = bad.any(1).nonzero()  # (k, 1)
        if len(rows):
            token = int(rows[0, 0])
            example = int(torch.searchsorted(ends, token, right=True))  # ends[example - 1] <= token < ends[example]
            raise NonFiniteStates(j, example, float(values[token][bad[token]][0]))


def _gather_tokens(states: list[torch.Tensor], positions: torch.Tensor) -> torch.Tensor:
    """(b, S, D) states of one token per example, on the device of ``positions``."""
    return torch.stack([tokens_of(state, positions, positions.device) for state in states], dim=1)


def storage_tensor(n_tokens: int, n_states: int, dim: int, storage_dtype: str) -> torch.Tensor:
    """A host (S, t, W) tensor in the storage dtype (W: the codec's stored width of ``dim``), for
    :meth:`StatePacker.pack` to fill."""
    return codec(storage_dtype).empty(n_states, n_tokens, dim)


def storage_buffer(n_tokens: int, n_states: int, dim: int, storage_dtype: str) -> StorageBuffer:
    """A host buffer for ``n_tokens`` tokens' states: the (S, t, W) values, and the (S, t, scales width) scales of
    a scaled codec."""
    return StorageBuffer(storage_tensor(n_tokens, n_states, dim, storage_dtype),
                         codec(storage_dtype).empty_scales(n_states, n_tokens, dim))


def storage_array(values: torch.Tensor, storage_dtype: str) -> np.ndarray:
    """The numpy view of a filled storage tensor, as written to disk (bfloat16 as raw uint16 bits)."""
    return codec(storage_dtype).file_view(values)


def scales_array(scales: torch.Tensor | None, storage_dtype: str) -> np.ndarray | None:
    """The numpy view of a filled scales tensor, as written to disk (int4's bfloat16 scales as uint16 bits)."""
    return codec(storage_dtype).scales_view(scales)
