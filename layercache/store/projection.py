"""A cache's projection of token states to K dimensions (``projection.safetensors``): per state, a mean and a basis.

``layercache extract --project K`` fits, per kept state s, the top K principal directions of that
state's token vectors on a seeded sample of the first split (:mod:`layercache.extraction.projection_fit`)
and stores every state as its K coordinates in them. The basis is one of :data:`~.schema.PROJECTION_BASES`
(``--project-basis``):

    pca            z = V_s (x - mu_s)                 V_s: (K, D) the covariance's top K eigenvectors
    standardized   z = V_s ((x - mu_s) / sigma_s)     sigma_s: (D,) each dimension's standard deviation,
                                                      V_s: (K, D) the correlation matrix's top K eigenvectors

(x: (D,) the model's state, mu_s: (D,) its mean; V_s has orthonormal rows.) PCA keeps the directions of
largest variance, so a few dimensions of outsized variance (a transformer's outlier features) take
the basis, and a signal that lies in directions of small variance (word order, acceptability) is lost;
standardised first, every dimension counts alike. Either way the map is affine, ``z = W_s (x - mu_s)``
with ``W_s = V_s`` or ``W_s = V_s diag(1 / sigma_s)``, and ``basis`` holds ``W_s``: every path that
projects (extraction, the live path, ``verify``, a head's saved basis) applies it the same way.

Token states and pooled vectors alike (a mean of projected tokens is the projection of their mean,
so pooled vectors are pooled first, then projected, as a head pooling projected tokens would get
them). Everything that reads the cache reads K-wide states and never needs the basis: heads, probes,
the depth analyses. What needs it are the paths that compare or join the cache with the model: the
live path and ``verify`` project fresh states with it, and the logit lens maps states back into the
model's space (``x ~ mu_s + V_s^T z``, or ``x ~ mu_s + sigma_s * (V_s^T z)`` standardised, keeping the
variance the projection kept).

==================== ============ =========================================================
tensor               shape        what
==================== ============ =========================================================
``mean``             (S, D) f32   each state's mean over the fitted tokens
``basis``            (S, K, D) f32 ``W_s``: each state's top-K principal directions, largest variance
                                  first, each row's largest entry positive (orthonormal rows for
                                  ``pca``; ``V_s / sigma_s`` column by column for ``standardized``)
``variance_kept``    (S,) f64     fraction of each state's variance (``standardized``: of its
                                  standardised variance, the correlation matrix's trace) kept
``scale``            (S, D) f32   ``standardized`` only: sigma_s, each dimension's standard deviation
                                  (never zero: see :mod:`layercache.extraction.projection_fit`)
==================== ============ =========================================================

plus one metadata key (``layercache_projection``: format, fitted tokens, split and seed, and from format 2
the basis kind). A ``pca`` file is written as format 1, byte for byte what layercache wrote before the
kind existed (so an older cache's basis fits again to its recorded bytes, and an older layercache reads
a new ``pca`` cache); a ``standardized`` file is format 2, which adds the kind and ``scale``; a format 1
file reads as ``pca``. The file
is written once, before the first shard, and never rewritten: every shard was projected with it,
so a file that no longer matches its checksum in ``manifest.side_files`` makes the cache
unreadable (the refusal says to re-extract), unlike the vocabulary and the lens, which extraction
can always write again from the model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.checksum import fsync_and_checksum
from ..core.confine import OwnedFolder
from ..core.files import write_file_atomic
from ..core.option_names import option
from ..errors import ConfigError
from .manifest import Manifest, SideFile
from .schema import PROJECTION_BASES
from .side_checks import SideFileCheck

PROJECTION_NAME = "projection.safetensors"
PROJECTION_FORMAT = 2
"""The newest format: 2 records the basis kind and, for ``standardized``, the scale; 1 (``pca``) had neither."""
PCA_FORMAT = 1
"""The format a ``pca`` file is written in: unchanged since before the kind existed."""
_META_KEY = "layercache_projection"


@dataclass
class Projection:
    """Per state: ``z = basis[s] @ (x - mean[s])``. Shapes: mean (S, D), basis (S, K, D), variance_kept (S,).

    ``kind``: ``pca`` (``basis`` has orthonormal rows) or ``standardized`` (``basis`` is ``V / scale``, the
    correlation matrix's eigenvectors divided column by column by ``scale`` (S, D), each dimension's standard
    deviation); the map is affine either way, so :meth:`apply` ignores the kind and only :meth:`reconstruct`
    reads it.
    """

    mean: torch.Tensor
    basis: torch.Tensor
    variance_kept: torch.Tensor
    tokens: int = 0
    """Tokens the fit saw."""
    split: str = ""
    seed: int = 0
    kind: str = "pca"
    scale: torch.Tensor | None = None
    """(S, D) float32, ``standardized`` only: what each dimension was divided by before the eigenvectors."""

    def __post_init__(self) -> None:
        if self.kind not in PROJECTION_BASES:
            raise ConfigError(f"{option('project_basis', self.kind, typed=repr(self.kind))} is not known; choose "
                              f"one of {', '.join(PROJECTION_BASES)}.")
        if (self.scale is None) != (self.kind == "pca"):
            raise ValueError(f"a {self.kind} projection {'takes no' if self.kind == 'pca' else 'needs a'} scale")

    @property
    def n_states(self) -> int:
        """S: the kept states it projects."""
        return int(self.basis.shape[0])

    @property
    def dim(self) -> int:
        """K: the width of the stored states."""
        return int(self.basis.shape[1])

    @property
    def width(self) -> int:
        """D: the model's width."""
        return int(self.basis.shape[2])

    def to(self, device: torch.device | str) -> Projection:
        """This projection with its tensors on ``device`` (float32)."""
        scale = None if self.scale is None else self.scale.to(device, torch.float32)
        return Projection(self.mean.to(device, torch.float32), self.basis.to(device, torch.float32),
                          self.variance_kept, self.tokens, self.split, self.seed, self.kind, scale)

    def subset(self, states: list[int]) -> Projection:
        """The projection of the kept states ``states`` only, in that order."""
        index = list(states)
        return Projection(self.mean[index], self.basis[index], self.variance_kept[index], self.tokens, self.split,
                          self.seed, self.kind, None if self.scale is None else self.scale[index])

    def directions(self) -> torch.Tensor:
        """``V``: each state's principal directions, orthonormal rows ``(S, K, D)`` float32 (for ``standardized``,
        in the standardised space: ``basis * scale``)."""
        if self.scale is None:
            return self.basis.float()
        return self.basis.float() * self.scale.float().to(self.basis.device)[:, None, :]  # (S, K, D)

    def state(self, s: int, values: torch.Tensor) -> torch.Tensor:
        """Kept state ``s``'s vectors ``(n, D)`` projected: ``(n, K)`` float32, on their device."""
        mean, basis = self.mean[s].to(values.device), self.basis[s].to(values.device)
        return (values.float() - mean) @ basis.T

    def apply(self, values: torch.Tensor, states: list[int] | None = None) -> torch.Tensor:
        """Vectors ``(..., S', D)`` of kept states ``states`` (default all, in order) as ``(..., S', K)`` float32."""
        index = list(range(self.n_states)) if states is None else list(states)
        mean = self.mean[index].to(values.device)  # (S', D)
        basis = self.basis[index].to(values.device)  # (S', K, D)
        return torch.einsum("...sd,skd->...sk", values.float() - mean, basis)

    def reconstruct(self, coordinates: torch.Tensor, states: list[int] | None = None) -> torch.Tensor:
        """Stored ``(..., S', K)`` back in the model's space ``(..., S', D)`` (lossy): ``mean + V^T z``, or
        ``mean + scale * (V^T z)`` for ``standardized`` (the standardisation undone after the basis)."""
        chosen = self if states is None else self.subset(list(states))
        mean = chosen.mean.to(coordinates.device)  # (S', D)
        directions = chosen.directions().to(coordinates.device)  # (S', K, D) orthonormal rows
        x = torch.einsum("...sk,skd->...sd", coordinates.float(), directions)  # (..., S', D)
        if chosen.scale is not None:
            x = x * chosen.scale.to(coordinates.device)
        return x + mean


def write_projection(cache_dir: str | os.PathLike, projection: Projection) -> SideFile:
    """Write ``projection.safetensors`` atomically; returns its manifest entry."""
    return write_projection_bytes(cache_dir, projection_bytes(projection))


def projection_bytes(projection: Projection) -> bytes:
    """The bytes of ``projection.safetensors`` for ``projection``: the same projection always gives the same bytes."""
    from safetensors.torch import save

    tensors = {"mean": projection.mean.detach().float().cpu().contiguous(),
               "basis": projection.basis.detach().float().cpu().contiguous(),
               "variance_kept": projection.variance_kept.detach().double().cpu().contiguous()}
    meta = {"format": PCA_FORMAT, "tokens": int(projection.tokens), "split": projection.split,
            "seed": int(projection.seed)}
    if projection.kind != "pca":  # format 1 stays the bytes it always was; the kind and scale need format 2
        tensors["scale"] = projection.scale.detach().float().cpu().contiguous()
        meta.update(format=PROJECTION_FORMAT, kind=projection.kind)
    return save(tensors, metadata={_META_KEY: json.dumps(meta, sort_keys=True)})


def write_projection_bytes(cache_dir: str | os.PathLike, data: bytes) -> SideFile:
    """Write :func:`projection_bytes` as ``projection.safetensors`` atomically; returns its manifest entry."""
    path = OwnedFolder.at(cache_dir).file(PROJECTION_NAME)  # never through a link
    checksum = write_file_atomic(path, lambda tmp: tmp.write_bytes(data), after=fsync_and_checksum)
    return SideFile(file=PROJECTION_NAME, bytes=len(data), checksum=str(checksum))


def read_projection(cache_dir: str | os.PathLike, manifest: Manifest) -> Projection | None:
    """The cache's projection, checked against its manifest; None for a cache stored at the model's width.

    Raises :class:`CacheError` when the manifest records a projection whose file is missing, changed
    since extraction, or does not fit the cache (states, widths).
    """
    k = manifest.storage.project
    if not k:
        return None
    side = SideFileCheck.at(cache_dir, PROJECTION_NAME, "a projection file",
                            "every shard was projected with it, so the cache cannot be read without it: re-extract "
                            f"with {option('overwrite', True)}")
    side.require_recorded(manifest.side_files.get("projection"))
    projection = side.load(lambda: _load(side.path))
    expected = (len(manifest.storage.layers), k, manifest.model.hidden_size)
    if tuple(projection.basis.shape) != expected:
        raise side.refusal(f"holds a basis of shape {tuple(projection.basis.shape)} where the manifest implies "
                           f"{expected}")
    if projection.kind != manifest.storage.projection_basis:
        raise side.refusal(f"holds a {projection.kind} basis where the manifest records "
                           f"{option('project_basis', manifest.storage.projection_basis)}")
    return projection


def _load(path: Path) -> Projection:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt", device="cpu") as handle:
        meta = json.loads((handle.metadata() or {}).get(_META_KEY, "{}"))
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    if not isinstance(meta, dict) or meta.get("format") not in (PCA_FORMAT, PROJECTION_FORMAT):
        raise ValueError(f"format should be {PCA_FORMAT} or {PROJECTION_FORMAT}")
    kind = "pca" if meta["format"] == PCA_FORMAT else meta.get("kind")  # format 1 predates the kind: pca
    if kind not in PROJECTION_BASES:
        raise ValueError(f"the basis kind should be one of {', '.join(PROJECTION_BASES)}")
    basis, mean, kept = tensors["basis"], tensors["mean"], tensors["variance_kept"]
    if basis.ndim != 3 or mean.shape != (basis.shape[0], basis.shape[2]) or kept.shape != (basis.shape[0],):
        raise ValueError("mean, basis and variance_kept should be (S, D), (S, K, D) and (S,)")
    if not (torch.isfinite(basis).all() and torch.isfinite(mean).all()):
        raise ValueError("the basis and the means should be finite")
    scale = tensors.get("scale") if kind != "pca" else None
    if kind != "pca" and (scale is None or scale.shape != mean.shape or not bool((scale > 0).all())
                          or not bool(torch.isfinite(scale).all())):
        raise ValueError(f"a {kind} basis needs a finite, positive scale of shape {tuple(mean.shape)}")
    return Projection(mean=mean.float(), basis=basis.float(), variance_kept=kept.double(),
                      tokens=int(meta.get("tokens", 0)), split=str(meta.get("split", "")),
                      seed=int(meta.get("seed", 0)), kind=kind, scale=None if scale is None else scale.float())


def check_projection_basis(project: int | None, basis: str) -> None:
    """Refuse (:class:`ConfigError`) a basis kind not in :data:`PROJECTION_BASES`, or a ``standardized`` basis
    asked for without a projection (it would be silently ignored)."""
    if basis not in PROJECTION_BASES:
        raise ConfigError(f"{option('project_basis', basis, typed=repr(basis))} is not known; choose one of "
                          f"{', '.join(PROJECTION_BASES)}.")
    if basis != "pca" and project is None:
        raise ConfigError(f"{option('project_basis', basis)} chooses how a projection's basis is fitted, but no "
                          f"projection was asked for: add {option('project')} (the number of dimensions to keep) or "
                          "leave the basis out.")


def check_projection_size(k: int, width: int) -> None:
    """Refuse (:class:`ConfigError`) a projection that would keep as many dimensions as the model has, or none."""
    if k < 1 or k >= width:
        raise ConfigError(f"{option('project', k)} must lie between 1 and {width - 1} (the model's states are {width} "
                          "wide; a projection to as many dimensions saves nothing).")
