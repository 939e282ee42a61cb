"""A decoder's logit-lens weights in the cache (``lens.safetensors``): its final norm and its unembedding.

The logit lens reads every layer's states through the model's own output head,
``logits_l = W_U · final_norm(h_l)`` (:mod:`layercache.depth.logit_lens`). The analyses never load a
model, so extraction saves the two pieces of it that the lens needs beside the shards:

==================== ============ =========================================================
tensor               shape        what
==================== ============ =========================================================
``unembedding``      (V, D)       the LM head's weight (or the tied input embeddings), in the
                                  checkpoint's dtype
``unembedding_bias`` (V,)         the LM head's bias, when it has one
``norm_weight``      (D,) float32 the final norm's weight, as the module holds it
``norm_bias``        (D,) float32 the final norm's bias, when it has one
==================== ============ =========================================================

and, as the file's metadata (one key, ``layercache_lens``, holding a JSON object with sorted
keys, so the same model always gives the same bytes): how the norm computes (``norm``:
``layernorm``, ``rmsnorm`` or ``none``; ``norm_eps``; ``norm_weight_offset``: 1 where the module
scales by ``1 + weight``, as Gemma's RMSNorm does), whether the stored ``layer_L`` is already
normed (``last_state``: ``normed`` or ``raw``), what the head does after the matmul
(``logit_scale``, ``logit_softcap``) and the model fingerprint it was read from. Extraction
decides the norm's kind by running the module itself against each formula, not by its class
name. Only decoders get the file; its checksum is in ``manifest.side_files`` and is checked on
every read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.checksum import fsync_and_checksum
from ..core.confine import OwnedFolder
from ..core.files import write_file_atomic
from ..core.option_names import option
from ..errors import CacheError
from .manifest import Manifest, SideFile
from .schema import SIDE_FILES
from .side_checks import SideFileCheck

LENS_NAME = SIDE_FILES["lens"]
LENS_FORMAT = "1"
_META_KEY = "layercache_lens"
NORM_KINDS = ("layernorm", "rmsnorm", "none")
"""``layernorm``: ``(x - mean) / sqrt(var + eps)``; ``rmsnorm``: ``x / sqrt(mean(x²) + eps)``; then
``* (weight + offset) + bias`` where present. ``none``: the model has no final norm."""


@dataclass(frozen=True)
class FinalNorm:
    """A model's final norm as plain tensors and the formula it computes."""

    kind: str
    """One of :data:`NORM_KINDS`."""
    weight: torch.Tensor | None = None
    """(D,) float32, as the module stores it (see ``weight_offset``), or None for no learned scale."""
    bias: torch.Tensor | None = None
    """(D,) float32, or None."""
    eps: float = 0.0
    weight_offset: float = 0.0
    """Added to ``weight`` before scaling: 1.0 for norms that scale by ``1 + weight`` (Gemma), else 0."""

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        """``states`` (..., D) normalised over the last axis, in float32."""
        x = states.float()  # (..., D)
        if self.kind == "none":
            return x
        if self.kind == "layernorm":
            x = x - x.mean(-1, keepdim=True)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., D)
        if self.weight is not None:
            x = x * (self.weight + self.weight_offset)
        if self.bias is not None:
            x = x + self.bias
        return x


@dataclass(frozen=True)
class LensWeights:
    """What the logit lens needs of a decoder: its final norm and its unembedding (read from ``lens.safetensors``)."""

    norm: FinalNorm
    unembedding: torch.Tensor
    """(V, D) the output head's weight, in the checkpoint's dtype."""
    unembedding_bias: torch.Tensor | None = None
    """(V,) or None."""
    logit_scale: float = 1.0
    """Multiplies the logits after the matmul (Cohere's ``logit_scale``, Granite's ``1 / logits_scaling``)."""
    logit_softcap: float | None = None
    """``cap * tanh(logits / cap)`` after the scale (Gemma 2's ``final_logit_softcapping``), or None."""
    normed_last: bool = False
    """Whether ``layer_L`` as stored comes out of the final norm already (seen by running the model at
    extraction), so the lens must not apply the norm to it again."""
    source: str = ""
    """Where the unembedding came from (``lm_head.weight``, or the tied input embeddings)."""
    model_fingerprint: str = ""

    @property
    def vocab_size(self) -> int:
        """V, the number of logits per token."""
        return int(self.unembedding.shape[0])

    @property
    def hidden_size(self) -> int:
        """D, the width of the states the lens reads."""
        return int(self.unembedding.shape[1])


# --- the file ---------------------------------------------------------------------------------
def write_lens(cache_dir: str | os.PathLike, lens: LensWeights) -> SideFile:
    """Write ``lens.safetensors`` atomically; returns its manifest entry (size and checksum of the bytes written)."""
    from safetensors.torch import save_file

    tensors = {"unembedding": lens.unembedding.detach().cpu().contiguous()}
    if lens.unembedding_bias is not None:
        tensors["unembedding_bias"] = lens.unembedding_bias.detach().cpu().contiguous()
    if lens.norm.weight is not None:
        tensors["norm_weight"] = lens.norm.weight.detach().float().cpu().contiguous()
    if lens.norm.bias is not None:
        tensors["norm_bias"] = lens.norm.bias.detach().float().cpu().contiguous()
    metadata = {"format": LENS_FORMAT, "norm": lens.norm.kind, "norm_eps": repr(float(lens.norm.eps)),
                "norm_weight_offset": repr(float(lens.norm.weight_offset)),
                "logit_scale": repr(float(lens.logit_scale)),
                "logit_softcap": "" if lens.logit_softcap is None else repr(float(lens.logit_softcap)),
                "last_state": "normed" if lens.normed_last else "raw", "source": lens.source,
                "model_fingerprint": lens.model_fingerprint}
    path = OwnedFolder.at(cache_dir).file(LENS_NAME)  # never through a link
    # One metadata key: safetensors writes several in a random order, and equal files should have equal checksums.
    packed = {_META_KEY: json.dumps(metadata, sort_keys=True)}
    checksum = write_file_atomic(path, lambda tmp: save_file(tensors, str(tmp), metadata=packed),
                                 after=fsync_and_checksum)
    return SideFile(file=LENS_NAME, bytes=path.stat().st_size, checksum=str(checksum))


def read_lens(cache_dir: str | os.PathLike, manifest: Manifest) -> LensWeights:
    """Read and check ``lens.safetensors``: listed in the manifest, unchanged since extraction, of this model.

    Raises :class:`CacheError` for an encoder cache (no next-token head), a cache without the file,
    or a file that changed or is not a lens file.
    """
    entry = manifest.side_files.get("lens")
    side = SideFileCheck.at(cache_dir, LENS_NAME, "a lens file",
                            "run the same `layercache extract` command again to rewrite it (no states are recomputed)")
    if entry is None:
        if manifest.model.kind != "decoder":
            raise CacheError(f"The cache {cache_dir} is of an {manifest.model.kind} model, which has no next-token "
                             "head to read layers through; the logit lens needs a cache of a decoder.")
        raise CacheError(f"The cache {cache_dir} holds no logit-lens weights (written by an older layercache, with "
                         f"{option('store', 'pooled')}, or from a checkpoint without an LM head); run the same "
                         "`layercache extract` command again with token states to add them, from a model with its LM "
                         "head.")
    side.require_recorded(entry)
    lens = side.load(lambda: _load(side.path))
    if lens.model_fingerprint != manifest.model.fingerprint:
        raise side.refusal("was read from another model than the manifest's")
    if lens.hidden_size != manifest.model.hidden_size:
        raise side.refusal(f"has an unembedding of width {lens.hidden_size} for states of width "
                           f"{manifest.model.hidden_size}")
    return lens


def _load(path: Path) -> LensWeights:
    """A :class:`LensWeights` from a lens file; ``ValueError`` naming the first bad entry."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt", device="cpu") as handle:
        meta = json.loads((handle.metadata() or {}).get(_META_KEY, "{}"))
        names = set(handle.keys())
        tensors = {name: handle.get_tensor(name) for name in names}
    if not isinstance(meta, dict) or meta.get("format") != LENS_FORMAT:
        raise ValueError(f"format should be {LENS_FORMAT}")
    kind = meta.get("norm")
    if kind not in NORM_KINDS:
        raise ValueError(f"norm should be one of {', '.join(NORM_KINDS)}")
    unembedding = tensors.get("unembedding")
    if unembedding is None or unembedding.ndim != 2 or not unembedding.is_floating_point():
        raise ValueError("unembedding should be a (V, D) float tensor")
    V, D = unembedding.shape
    shapes = {"unembedding_bias": (V,), "norm_weight": (D,), "norm_bias": (D,)}
    for name, shape in shapes.items():
        if name in tensors and tuple(tensors[name].shape) != shape:
            raise ValueError(f"{name} should have shape {shape}")
    if meta.get("last_state") not in ("normed", "raw"):
        raise ValueError("last_state should be normed or raw")
    softcap = meta.get("logit_softcap", "")
    numbers = {k: float(meta[k]) for k in ("norm_eps", "norm_weight_offset", "logit_scale")}
    if not all(math.isfinite(v) for v in numbers.values()) or numbers["norm_eps"] < 0:
        raise ValueError("norm_eps, norm_weight_offset and logit_scale should be finite (eps at least 0)")
    norm = FinalNorm(kind=kind, weight=_float(tensors.get("norm_weight")), bias=_float(tensors.get("norm_bias")),
                     eps=numbers["norm_eps"], weight_offset=numbers["norm_weight_offset"])
    return LensWeights(norm=norm, unembedding=unembedding, unembedding_bias=tensors.get("unembedding_bias"),
                       logit_scale=numbers["logit_scale"], logit_softcap=float(softcap) if softcap else None,
                       normed_last=meta["last_state"] == "normed",
                       source=meta.get("source", ""), model_fingerprint=meta.get("model_fingerprint", ""))


def _float(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.float()
