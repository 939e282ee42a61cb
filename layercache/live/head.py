"""One trained run bound to a live backbone: which states it reads, how the cache shaped them, its predictions.

A head was trained on what the cache stored, so a :class:`LiveHead` rebuilds exactly that from the
backbone's states of one batch: the stored tokens of each example (windows stitched back, as
:func:`~layercache.extraction.forward.token_index` picks them), rounded through the cache's storage
dtype, then either padded into the ``(B, T, S, D)`` layout every feed shares (padded positions
repeat the row's first token; the mask hides them), or, for a head trained on the cache's pooled
vectors (``source`` ``pooled:<mode>``), pooled by extraction's own
:func:`~layercache.extraction.forward.pool` (mask-aware, ``mean_skip_first`` as the cache recorded)
in float32 before the rounding, exactly as the cache computed them, into ``(B, 1, S, D)``. The
input normalisation (the training split's statistics) is part of the head's model, so it comes
with the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..extraction.forward import pool
from ..heads.estimator import LayerHead
from ..heads.scoring.evaluation import word_labels
from ..store.batches import PaddedPositions
from ..store.feature_source import parse_source
from ..store.reader import LayerCache
from ..store.storage import codec, codec_names


@dataclass
class LiveHead:
    """A loaded run and the backbone states it reads.

    Attributes:
        name: how results name it (the run folder's name, made unique within a bundle).
        head: the fitted :class:`~layercache.heads.estimator.LayerHead`.
        states: index of each state the head reads among the backbone's ``embeddings, layer_1 … layer_L``.
        max_length, stride: how the training cache cut texts into windows (``None``: unknown, the
            backbone's own limit / truncation).
    """

    name: str
    head: LayerHead
    states: list[int]
    max_length: int | None
    stride: int | None

    @classmethod
    def load(cls, run: str | Path, layer_names: list[str], name: str | None = None) -> "LiveHead":
        """Load the run folder ``run`` for a backbone whose states are ``layer_names``."""
        return cls.bind(LayerHead.load(run), layer_names, name or Path(run).name, run)

    @classmethod
    def bind(cls, head: LayerHead, layer_names: list[str], name: str, run: str | Path) -> "LiveHead":
        """Bind a loaded ``head`` (from the folder ``run``) to a backbone whose states are ``layer_names``."""
        missing = [n for n in head.layer_names_ if n not in layer_names]
        if missing:
            raise ConfigError(f"The run {run} reads state {missing[0]}, which the backbone does not have; load the "
                              "backbone the run was trained with.")
        max_length, stride = text_settings(head)
        return cls(name=name, head=head, states=[layer_names.index(n) for n in head.layer_names_],
                   max_length=max_length, stride=stride)

    @property
    def tasks(self):
        """The label tasks this head predicts."""
        return self.head.tasks_

    @property
    def needs_words(self) -> bool:
        """Whether a task of this head labels words (the input must then be split into words)."""
        return any(t.kind == "token" for t in self.tasks)

    @property
    def storage_dtype(self) -> str:
        """The dtype the training cache stored states in (the head learned from those values)."""
        return self.head.cache_info_.storage_dtype or "float32"

    @torch.no_grad()
    def predict(self, flat: torch.Tensor, lengths: torch.Tensor, at: PaddedPositions,
                word_ids: np.ndarray | None, n_words: np.ndarray | None) -> dict[str, tuple]:
        """Task -> (labels, probabilities) of one batch.

        ``flat (t, S, D)``: this head's states of every stored token of the batch, example after
        example, in the forward pass's dtype; ``lengths (B,)``: stored tokens per example; ``at``: the
        batch's padded layout; ``word_ids (t,)`` and ``n_words (B,)`` for token tasks. Labels are
        ``(B,)`` class ids or values, or one ``(n_words_i,)`` array per example for a token task;
        probabilities ``(B, C)`` for sequence classification, else None.
        """
        model = self.head.model_
        # As the cache served them: rounded to its storage precision (an int8 cache: quantised and dequantised).
        as_stored = codec(self.storage_dtype).round if self.storage_dtype in codec_names() else (lambda x: x)
        projection = getattr(self.head, "projection_", None)  # trained on a projected cache: project as it did
        if projection is not None:
            flat = projection.apply(flat.float())  # (t, S, K)
        device = next(model.parameters()).device
        mode = parse_source(self.head.source_, allow_auto=False).mode
        if mode is not None:  # the cache's pooled vectors: pooled in float32, then stored
            pooled = pool(flat.float(), lengths, [mode], mean_skip_first=model.mean_skip_first)[mode]  # (B, S, D)
            states = as_stored(pooled).float().unsqueeze(1).to(device)  # (B, 1, S, D)
            mask = torch.ones(len(lengths), 1, dtype=torch.bool, device=device)  # (B, 1)
        else:
            tokens = as_stored(flat.float()).float()  # (t, S, D) as stored
            states = tokens[torch.from_numpy(at.token).to(tokens.device)].to(device)  # (B, T, S, D)
            mask = at.mask.to(device)  # (B, T)
        out = model(states, mask).outputs
        result = {}
        for task in self.tasks:
            output = out[task.name]
            if task.kind == "regression":
                result[task.name] = (model.regression_values(task.name, output).cpu().numpy(), None)
            elif task.kind == "sequence":
                probs = torch.softmax(output.float(), dim=-1).cpu().numpy()  # (B, C)
                result[task.name] = (probs.argmax(-1), probs)
            else:
                token_ids = output.argmax(-1).cpu().numpy()  # (B, T)
                result[task.name] = (word_labels(task, token_ids, at.word_ids(word_ids).numpy(), n_words), None)
        return result


def text_settings(head: LayerHead) -> tuple[int | None, int | None]:
    """(maximum length, stride) of the head's training cache: from the run, else from the cache's manifest.

    Runs record both since the live bundle; an older run's are read from its training cache when that
    is still where the run says, else unknown (``None``: the backbone's limit, truncation).
    """
    info = head.cache_info_  # the run's recorded cache, a typed section
    if info.records_text_settings:
        return info.max_length, info.stride
    where = head.data_.get("cache")
    if where:
        try:
            manifest = LayerCache.open(where).manifest
        except Exception:  # noqa: BLE001 - any unreadable cache just means "unknown"
            return None, None
        if manifest.model.fingerprint == info.model_fingerprint:
            return manifest.tokenizer.max_length, manifest.tokenizer.stride
    return None, None
