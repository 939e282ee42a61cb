"""The storage dtype ``auto`` resolves to: float16, unless one probe batch has states beyond its range.

``--storage-dtype auto`` (the default) is resolved before the configuration is hashed, by one
probe forward pass: the first planned batch of the first split (batches are planned longest
first, so it holds the longest examples). float16 unless that batch has a kept state value beyond
the float16 range, then bfloat16. That batch is the split's first forward pass anyway, so its
states are held (:mod:`.held`, within its byte budget) and packed when the batch's turn comes:
the probe costs no forward pass of its own. The manifest and the hash hold only the resolved
dtype, so an ``auto`` run and an explicit run with the dtype it resolved to are the same
configuration and resume each other. A resume of a cache that ``auto`` chose reuses the recorded
choice without a probe. Values beyond the range that the probe did not see are clamped and
counted, as with an explicit float16.
"""

from __future__ import annotations

import logging

import torch

from ..backbone.loader import Backbone
from ..core.option_names import option
from ..sources.records import DatasetRecords
from ..store.manifest import Manifest
from ..store.storage import AUTO, FP16_MAX
from .forward import pad_windows, run_batch, token_index
from .held import HeldStates, stored_tokens
from .packing import StatePacker
from .plan import SplitPlan

log = logging.getLogger("layercache")


def resolve_storage_dtype(requested: str, existing: Manifest | None, backbone: Backbone, records: DatasetRecords,
                          plans: dict[str, SplitPlan],
                          keep: list[int], held: HeldStates | None = None) -> tuple[str, str | None]:
    """The storage dtype to write, and for ``auto`` why it was chosen (recorded in the manifest).

    The probe's forward pass is offered to ``held``, so that the extraction of its batch reuses it.

    ``auto``: the dtype an existing cache recorded as chosen by ``auto`` (a resume repeats the
    choice without a forward pass); else float16 unless the probe batch (the first planned batch
    of the first split: its longest examples) has a kept state value beyond the float16 range.
    One ``aminmax`` per kept state decides the common case (~0.2 % of the batch's forward pass for
    MiniLM); only when some value, padding included, is beyond the range are the real tokens' values
    counted, by the same :class:`StatePacker` code that counts overflow during the run.
    """
    if requested != AUTO:
        return requested, None
    if existing is not None and existing.extraction.storage_dtype_auto:
        return existing.storage.dtype, existing.extraction.storage_dtype_auto
    name = next((n for n, plan in plans.items() if plan.batches), None)
    if name is None:
        return "float16", "auto: no examples to probe"
    examples = [plans[name].examples[i] for i in plans[name].batches[0]]
    ids, mask = pad_windows(examples, backbone.tokenizer.pad_token_id)
    hidden = backbone.hidden_states(ids, mask)  # L+1 x (R, W, D)
    index = token_index(examples, mask)  # (t,) the stored tokens
    if held is not None:
        held.hold(name, 0, hidden, keep, index)
    largest = max(max(-float(low), float(high)) for low, high in (torch.aminmax(hidden[i]) for i in keep))
    overflow = 0
    if largest > FP16_MAX:  # NaN compares false here and is refused, with its row, when the batch is packed
        counter = StatePacker(len(keep), backbone.hidden_size, storage_dtype="float16", pooling=[],
                              device=backbone.device)
        overflow = run_batch(backbone, examples, records.splits[name], keep=keep, tasks=[], packer=counter,
                             out=None, split=name, first_row=0,
                             hidden=stored_tokens(hidden, keep, index)).overflow  # real tokens only
    where = f"the first batch of split {name!r} ({len(examples)} longest examples)"
    if not overflow:
        return "float16", f"auto: {where} stays within ±{FP16_MAX:,.0f}"
    log.info("Storing bfloat16 (%s): %s state values of %s exceed the float16 range (±%s); pass %s to store them "
             "clamped instead.", option("storage_dtype", "auto"), f"{overflow:,}", where, f"{FP16_MAX:,.0f}",
             option("storage_dtype", "float16"))
    return "bfloat16", f"auto: {overflow:,} values of {where} exceed ±{FP16_MAX:,.0f}"
