"""Forward passes that ran before the main pass, held so that their batches are not forwarded twice.

Two steps forward planned batches before the first shard is written: the ``--storage-dtype auto``
probe (the first batch of the first split, :mod:`.dtype_probe`) and the ``--project K`` fit (a
seeded sample of the first split's batches, :mod:`.projection_fit`). The main pass later extracts
those same batches; the forward is the same computation, so each step offers its batches' states
to one :class:`HeldStates`, and the main pass takes a batch's states from it instead of running the
model again (the cache written is the same, byte for byte).

What is held, and why so: only the kept states, only the batch's stored tokens ((t, D) each,
example after example, as :func:`~.forward.token_index` picks them from the padded (R, W, D)
forward), in the forward's dtype, on the host. Padding and the tokens of overlapping windows that
are not stored are never read again, so they are not kept; the host, because device memory is the
forward's and the packer's. Moving the states to the host and back costs bus time on a GPU run
(twice the batch's kept token states); for all but the smallest models that is far cheaper than
the forward it saves.

Memory is bounded: at most :func:`held_budget` bytes (:data:`HELD_BYTES`, and no more than
:data:`HELD_SHARE` of the process's memory budget, :func:`~layercache.core.memory.current_budget`).
A batch that does not fit is not held and is simply forwarded again when its turn comes. States
are only used by the process that made them, for the batches it extracts in this run
(:meth:`HeldStates.keep_only`); everything else is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ..backbone.placement import tokens_of
from ..core.memory import current_budget

HELD_BYTES = 1 << 30
"""Most bytes of held states, whatever the memory budget."""
HELD_SHARE = 0.25
"""Most share of the process's memory budget that held states take (the run needs the rest)."""

HOST = torch.device("cpu")


@dataclass(frozen=True)
class HeldBatch:
    """One planned batch's kept states from a forward pass that already ran: its stored tokens only."""

    states: tuple[torch.Tensor | None, ...]
    """L+1 entries indexed like :meth:`~layercache.backbone.loader.Backbone.hidden_states`' tuple: a kept
    state's entry is (t, D), the batch's t stored tokens example after example, in the forward's dtype;
    the states not kept are None."""

    @property
    def n_tokens(self) -> int:
        """t: the batch's stored tokens."""
        return next(int(s.shape[0]) for s in self.states if s is not None)

    @property
    def nbytes(self) -> int:
        """Bytes the held tensors take."""
        return sum(s.numel() * s.element_size() for s in self.states if s is not None)


def stored_tokens(hidden: Sequence[torch.Tensor], keep: Sequence[int], index: torch.Tensor,
                  device: torch.device | None = None) -> HeldBatch:
    """The kept states of a forward pass (L+1 x (R, W, D)), cut to the stored tokens ``index`` (t,) on ``device``.

    ``device`` None leaves each state where the forward put it (a batch packed at once needs no copy).
    """
    kept = set(keep)
    return HeldBatch(tuple(tokens_of(state, index, device) if i in kept else None  # (t, D)
                           for i, state in enumerate(hidden)))


def held_budget() -> int:
    """Bytes of states a run may hold: :data:`HELD_BYTES`, at most :data:`HELD_SHARE` of the memory budget."""
    return max(0, min(HELD_BYTES, int(HELD_SHARE * current_budget())))


class HeldStates:
    """Batches' kept states from forward passes that ran before the main pass, keyed by (split, batch).

    :meth:`hold` copies a batch's stored tokens to the host when they fit the byte budget;
    :meth:`peek` reads them (the fit's later passes); :meth:`take` hands them out once and forgets
    them (the main pass). An empty holder (budget 0) holds nothing and every batch is forwarded.
    """

    def __init__(self, budget_bytes: int = 0) -> None:
        self.budget_bytes = budget_bytes
        self._batches: dict[tuple[str, int], HeldBatch] = {}
        self._nbytes = 0

    def __len__(self) -> int:
        return len(self._batches)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._batches

    @property
    def nbytes(self) -> int:
        """Bytes of the states held now."""
        return self._nbytes

    def hold(self, split: str, b: int, hidden: Sequence[torch.Tensor], keep: Sequence[int],
             index: torch.Tensor) -> HeldBatch | None:
        """Hold batch ``b`` of ``split``'s kept states (L+1 x (R, W, D)) at its stored tokens ``index`` (t,).

        Returns the held batch, or None (nothing copied) when it would take the holder past its budget.
        """
        if (split, b) in self._batches:
            return self._batches[split, b]
        if not keep:
            return None
        state = hidden[keep[0]]
        need = int(index.shape[0]) * state.shape[-1] * state.element_size() * len(keep)
        if self._nbytes + need > self.budget_bytes:
            return None
        batch = stored_tokens(hidden, keep, index, HOST)
        self._batches[split, b] = batch
        self._nbytes += batch.nbytes
        return batch

    def peek(self, split: str, b: int) -> HeldBatch | None:
        """Batch ``b`` of ``split``'s held states, still held; None when not held."""
        return self._batches.get((split, b))

    def take(self, split: str, b: int) -> HeldBatch | None:
        """Batch ``b`` of ``split``'s held states, handed out once and then forgotten; None when not held."""
        batch = self._batches.pop((split, b), None)
        if batch is not None:
            self._nbytes -= batch.nbytes
        return batch

    def keep_only(self, batches: Mapping[str, Iterable[int]]) -> None:
        """Drop every held batch not in ``batches`` (split -> batch numbers): those this process will not extract."""
        wanted = {(name, int(b)) for name, numbers in batches.items() for b in numbers}
        for key in [key for key in self._batches if key not in wanted]:
            self.take(*key)

    def clear(self) -> None:
        """Drop every held batch."""
        self.keep_only({})
