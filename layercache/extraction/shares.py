"""Who extracts what: the planned batches not committed yet, cut into one share per writer.

A cache's work is its splits' planned batches (:mod:`.plan`); a shard holds consecutive batches
of one writer. Before writing, the one process that prepares a run (the only process, or the
first rank of a distributed run) merges what earlier writers committed (:mod:`layercache.store.parts`),
so the batches left are exactly those no listed shard covers, whatever number of writers ran
before. :func:`assign_shares` cuts them, in split and batch order, into ``n_writers`` contiguous
shares of about equal tokens (the forward pass costs by tokens, not rows). The cut is a pure
function of the manifest and the plans, so every writer computes the same shares on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..store.manifest import Manifest
from .plan import SplitPlan


@dataclass(frozen=True)
class Share:
    """The planned batches writer ``writer`` of ``n_writers`` extracts: split -> batch numbers, ascending."""

    writer: int
    n_writers: int
    batches: dict[str, tuple[int, ...]]

    @property
    def n_batches(self) -> int:
        """Batches in the share, all splits together."""
        return sum(map(len, self.batches.values()))

    def rows(self, split: str, plan: SplitPlan) -> int:
        """Examples (cache rows) of ``split`` in the share."""
        starts = plan.first_rows
        return int(sum(starts[b + 1] - starts[b] for b in self.batches.get(split, ())))


def remaining_batches(manifest: Manifest, plans: dict[str, SplitPlan]) -> dict[str, list[int]]:
    """Per split, the planned batches no committed shard covers, ascending."""
    return {name: manifest.splits[name].uncovered_batches() for name in plans}


def assign_shares(manifest: Manifest, plans: dict[str, SplitPlan], n_writers: int) -> list[Share]:
    """The remaining batches cut into ``n_writers`` contiguous shares balanced by tokens (some may be empty).

    Batch ``b`` goes to the writer whose slice of the total tokens holds the batch's middle token,
    so shares follow the plan's order and differ by at most about one batch's tokens.
    """
    if n_writers < 1:
        raise ConfigError(f"A cache needs at least one writer, got {n_writers}.")
    work = [(name, b, plan.batch_tokens(b)) for name, batches in remaining_batches(manifest, plans).items()
            for plan in (plans[name],) for b in batches]
    total = max(sum(t for _, _, t in work), 1)
    shares: list[dict[str, list[int]]] = [{} for _ in range(n_writers)]
    before = 0  # tokens of the batches before this one
    for name, b, tokens in work:
        writer = min(n_writers - 1, ((2 * before + tokens) * n_writers) // (2 * total))
        shares[writer].setdefault(name, []).append(b)
        before += tokens
    return [Share(k, n_writers, {name: tuple(batches) for name, batches in share.items()})
            for k, share in enumerate(shares)]
