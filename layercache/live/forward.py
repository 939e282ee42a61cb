"""A backbone forward pass that keeps only the states asked for and stops after the deepest of them.

Hugging Face models record ``hidden_states[i]`` (for ``i < L``) as the input of block ``i``: the
embeddings are the input of the first block, ``layer_i`` the input of block ``i``. So the states up
to ``layer_k`` (``k < L``) are read with forward *pre*-hooks on the first ``k + 1`` blocks, and the
pre-hook of block ``k`` (the ``k+1``-th) raises once it has what it needs: that block and everything
after it never run. ``layer_L`` may come after a final norm (GPT-2, Llama, T5), so a pass that
needs it runs the whole model with ``output_hidden_states``.

The blocks are found without a list of architectures: the first ``nn.ModuleList`` (in module
order) holding exactly ``n_layers`` modules (``encoder.layer`` in BERT, ``h`` in GPT-2, ``layers`` in
Llama and BART's encoder, ``block`` in T5's). The construction checks it once on a short text: the
hooked states must equal the full forward's ``hidden_states``, else every pass runs the whole
model (:attr:`PartialForward.stops_early` is then False), which is slower but never wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from ..backbone.loader import Backbone

log = logging.getLogger(__name__)


class _Stop(Exception):
    """Raised inside a pre-hook once every state asked for has been read."""


class PartialForward:
    """Run ``backbone`` on padded windows, keeping only some states and stopping after the deepest one.

    Args:
        backbone: the frozen model.
    """

    def __init__(self, backbone: Backbone) -> None:
        self.backbone = backbone
        self.blocks = _find_blocks(backbone.model, backbone.n_layers)
        self.stops_early = self.blocks is not None and self._check()
        if self.blocks is not None and not self.stops_early:
            log.info("The hooked states of %s differ from its hidden_states; every pass runs the whole model.",
                     backbone.name)

    @torch.inference_mode()
    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               keep: Sequence[int]) -> dict[int, torch.Tensor]:
        """State index (0 = embeddings … L) -> its ``(R, W, D)`` tensor, for each of ``keep``.

        ``input_ids``, ``attention_mask``: ``(R, W)`` padded windows, as
        :func:`~layercache.extraction.forward.pad_windows` makes them. One forward pass, stopped after
        block ``max(keep)`` when that is below ``L``.
        """
        keep = sorted(set(int(k) for k in keep))
        deepest = keep[-1]
        if not self.stops_early or deepest >= self.backbone.n_layers:
            hidden = self.backbone.hidden_states(input_ids, attention_mask)  # L+1 x (R, W, D)
            return {k: hidden[k] for k in keep}
        return self._hooked(input_ids, attention_mask, keep)

    def _hooked(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                keep: list[int]) -> dict[int, torch.Tensor]:
        """States ``keep`` (all below L) read off the blocks' inputs; blocks from ``max(keep)`` on never run."""
        deepest, wanted, got = keep[-1], set(keep), {}

        def reader(index: int):
            def hook(module, args, kwargs):
                if index in wanted:
                    got[index] = args[0] if args else kwargs["hidden_states"]  # (R, W, D) input of block `index`
                if index == deepest:
                    raise _Stop
            return hook

        handles = [self.blocks[i].register_forward_pre_hook(reader(i), with_kwargs=True) for i in range(deepest + 1)]
        try:
            # output_hidden_states stays off: the model need not collect states nobody reads.
            self.backbone.model(input_ids=input_ids.to(self.backbone.device),
                                attention_mask=attention_mask.to(self.backbone.device), return_dict=True)
        except _Stop:
            pass
        finally:
            for handle in handles:
                handle.remove()
        missing = wanted - set(got)
        if missing:  # a model whose blocks never ran the hooks: _check would have caught it
            raise RuntimeError(f"states {sorted(missing)} were not seen by the block hooks")
        return got

    def _check(self) -> bool:
        """Whether the hooked states equal the full forward's hidden states on a short text."""
        enc = self.backbone.tokenizer(["layer cache", "a longer layer cache text"], padding=True,
                                      return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]  # (2, W) each
        full = self.backbone.hidden_states(ids, mask)  # L+1 x (2, W, D)
        below = list(range(self.backbone.n_layers))
        try:
            with torch.inference_mode():
                hooked = self._hooked(ids, mask, below)
        except (RuntimeError, KeyError, IndexError, TypeError):
            return False
        return all(hooked[k].shape == full[k].shape and torch.equal(hooked[k], full[k]) for k in below)


def _find_blocks(model: torch.nn.Module, n_layers: int) -> torch.nn.ModuleList | None:
    """The model's list of transformer blocks: the first ``ModuleList`` of exactly ``n_layers`` modules."""
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return module
    return None
