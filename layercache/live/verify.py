"""``verify_cache``: re-run a cache's backbone on a seeded sample of its examples and compare the states.

    result = verify_cache("runs/demo-cache", sample=100, seed=0)
    result.passed, result.rows          # per state: largest / mean absolute difference, relative to its rms
    result.failure                       # one sentence naming split, row, state, likely cause and fix

The backbone is loaded by the name, source and revision the manifest records, and refused (one
sentence, :class:`~layercache.errors.CacheMismatchError`) when its weights or tokenizer fingerprint
differ from the manifest's: then the cache is already known to be from another model. The sampled
rows (``sample`` per split, drawn with ``seed``) run through the model exactly as extraction ran
them (:mod:`.cached_inputs`: the stored token ids, windows rebuilt and checked), in the manifest's
forward dtype unless ``dtype`` says otherwise; the kept states of the stored tokens are compared
with the shard's token states, and the pooled vectors (extraction's own
:func:`~layercache.extraction.forward.pool`, float32, ``mean_skip_first`` as recorded) with the
stored ones.

**The tolerance.** A stored value passes when

    |stored - fresh| <= ulp(storage, |fresh|) + FORWARD_NOISE[forward dtype] * rms(state)

``ulp(storage, x)`` is the spacing of the storage dtype's numbers at ``x`` (2^(floor(log2 x) - m),
``m`` = 10 mantissa bits for float16, 7 for bfloat16, 23 for float32; never below the smallest
subnormal). Rounding to the storage dtype moves a value by at most half of it, so one ulp leaves
the other half for a value that lies near a rounding boundary and rounds the other way after a
tiny change. That change comes from the forward pass itself: the sample runs in other batches,
with other padding, than extraction did, and the kernels' summation order differs with the shapes.
Its size scales with the state's magnitude, so the second term is a multiple of the state's rms
(from the manifest's statistics of that split): ``FORWARD_NOISE`` is 100 machine epsilons of the
forward dtype (about 1e-5 for float32; 0.1 for float16 and 0.8 for bfloat16, whose recomputation in
other batches is genuinely that loose). A float16 cache is thus held to ~1e-3 of each value, a
bfloat16 one to ~8e-3, a float32 one to float32 noise. Values beyond the float16 range are compared
after the clamp extraction applies. An int8 cache stores each vector (a token's state, a pooled
vector) in steps of its own largest magnitude / 127, so rounding moves a value by at most half a
step, and the ulp term becomes one step of that vector (``max|fresh| / 127``): about 1 % of the
largest value, the quantisation itself. An int4 cache does the same per group of 32 values, in steps of
the group's largest magnitude / 7 (its bfloat16 scale): the term is one step of each value's own group,
twice the codec's error bound (:meth:`~layercache.store.codecs.StorageCodec.error_bound`), so an
outlier widens the tolerance of its own group only. A state of another model revision, tokenizer or forward
dtype differs by a sizeable fraction of its rms and fails by orders of magnitude.

**Clamping.** float16 cannot hold values beyond ±65,504 (a large decoder's massive activations), and
extraction stores such a value as ±65,504, counting it in the manifest. So in a float16 cache the
fresh values are clamped the same way before the comparison, and the result says how many were
(:attr:`VerifyResult.clamped`, per state :attr:`StateDiff.clamped`): a clamped value matches its
stored one whatever the model computed beyond the limit, so a large count means a large share of
those states was never compared; ``--storage-dtype bfloat16`` keeps them.

Checksums are not read here: ``verify`` answers whether the *values* are those of the backbone,
so a shard edited after extraction fails on the states it changed (the failure sentence points to
``layercache info --check``, which tells an edited shard from a changed model).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..backbone.loader import Backbone, load_backbone, tokenizer_fingerprint
from ..backbone.placement import tokens_of
from ..backbone.words import word_prefix
from ..core.option_names import call, option
from ..core.threads import computes
from ..errors import CacheMismatchError, ConfigError
from ..extraction.forward import pad_windows, pool, token_index
from ..heads.run_folders.provenance import short_digest
from ..store.projection import Projection
from ..store.reader import LayerCache, using_cache
from ..store.storage import codec
from .cached_inputs import cached_examples

MANTISSA_BITS = {"float16": 10, "bfloat16": 7, "float32": 23}
SMALLEST_SUBNORMAL = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149}
FORWARD_NOISE = {dtype: 100 * torch.finfo(getattr(torch, dtype)).eps for dtype in MANTISSA_BITS}
"""Per forward dtype: the allowed recomputation noise, as a fraction of a state's rms."""
BATCH_EXAMPLES = 16


def ulp(dtype: str, magnitude: torch.Tensor) -> torch.Tensor:
    """The spacing of ``dtype``'s numbers at ``|magnitude|`` (elementwise, float32)."""
    exponent = torch.floor(torch.log2(magnitude.abs().clamp_min(torch.finfo(torch.float32).tiny)))
    return torch.clamp_min(torch.exp2(exponent - MANTISSA_BITS[dtype]), SMALLEST_SUBNORMAL[dtype])


def tolerance(dtype: str, forward_dtype: str, fresh: torch.Tensor, rms: torch.Tensor | float) -> torch.Tensor:
    """The largest difference a stored value may have from ``fresh (n, D)`` (see the module docstring)."""
    stored_as = codec(dtype)
    # A scaled codec rounds each vector (int8) or group (int4) to a step of its own: one full step, as one ulp
    # above; its error bound is half of it, per vector (n, 1) or per value (n, D).
    rounding = 2 * stored_as.error_bound(fresh) if stored_as.scaled else ulp(dtype, fresh)
    return rounding + FORWARD_NOISE.get(forward_dtype, FORWARD_NOISE["float32"]) * rms


@dataclass
class StateDiff:
    """How far the stored values of one state (token states, or one pooling) are from a fresh forward pass."""

    what: str
    """``tokens`` or ``pooled:<mode>``."""
    state: str
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    """Largest absolute difference divided by the state's rms (manifest statistics of its split)."""
    mean_rel: float = 0.0
    worst: float = 0.0
    """Largest difference as a fraction of its tolerance: above 1 fails."""
    worst_at: dict = field(default_factory=dict)
    """Where ``worst`` is: split, cache row, source row, token."""
    values: int = 0
    clamped: int = 0
    """Fresh values beyond the float16 range, clamped to ±65,504 before the comparison (float16 caches only)."""

    @property
    def passed(self) -> bool:
        """Whether every compared value is within its tolerance."""
        return self.worst <= 1.0


@dataclass
class VerifyResult:
    """What :func:`verify_cache` found."""

    cache: str
    model: str
    storage_dtype: str
    forward_dtype: str
    device: str
    examples: dict[str, int]
    """Split -> examples compared."""
    rows: list[StateDiff]
    seconds: float
    failure: str | None = None
    """One sentence naming the first failing state, where, the likely cause and the fix; None when passed."""
    parity: dict | None = None
    """Set by the CLI's ``--run``: :func:`~layercache.live.parity.parity` of that run."""
    clamped: int = 0
    """Fresh values beyond the float16 range, clamped to ±65,504 before the comparison as extraction stored them
    (float16 caches only; the sum of the rows' ``clamped``)."""
    compared: int = 0
    """Values compared in all (the sum of the rows' ``values``)."""
    overflow_at_extraction: int = 0
    """Values extraction clamped over the whole cache (the manifest's count)."""

    def clamping(self) -> str | None:
        """One sentence on the values clamped to the storage dtype's range; None when it has no limit."""
        limit = codec(self.storage_dtype).limit
        if limit is None:
            return None
        dtype = self.storage_dtype
        if not self.clamped:
            return f"No fresh value was beyond the {dtype} range (±{limit:,.0f}), so none was clamped."
        return (f"{self.clamped:,} of {self.compared:,} fresh values ({self.clamped / max(1, self.compared):.2%}) "
                f"were beyond the {dtype} range and clamped to ±{limit:,.0f} before the comparison, as extraction "
                f"stored them ({self.overflow_at_extraction:,} in the whole cache); beyond the limit the cache holds "
                f"no value to compare: re-extract with {option('storage_dtype', 'bfloat16')} to keep them.")

    @property
    def passed(self) -> bool:
        """Whether every state of every sampled example is within tolerance."""
        return self.failure is None

    def to_json(self) -> dict:
        """Plain JSON values, ``passed`` included."""
        out = asdict(self)
        out["passed"] = self.passed
        out["clamping"] = self.clamping()
        for row, diff in zip(out["rows"], self.rows):
            row["passed"] = diff.passed
        return out


def load_cache_backbone(cache: LayerCache, *, device: str = "auto", dtype: str | None = None,
                        allow_pickle: bool = False, device_map: str | None = None,
                        max_memory: Mapping[str, int | str] | None = None) -> Backbone:
    """The backbone the manifest names (source, else name), refused unless weights and tokenizer match it.

    ``dtype``: the forward dtype (default: the one extraction used); ``device_map`` and ``max_memory``
    split a model larger than one device (:func:`~layercache.backbone.loader.load_backbone`). The
    tokenizer is compared with and without the word prefix extraction adds for pre-split words, so
    either kind of cache matches.
    """
    m = cache.manifest
    source = m.model.source or m.model.name
    options = {"device": device, "dtype": dtype or m.model.forward_dtype, "max_length": m.tokenizer.max_length,
               "allow_pickle": allow_pickle, "device_map": device_map, "max_memory": max_memory}
    backbone = load_backbone(source, **options)
    if backbone.fingerprint == m.model.fingerprint and backbone.tokenizer_fingerprint != m.tokenizer.fingerprint:
        # A cache of pre-split words: its tokenizer fingerprint records the word prefix (and, for
        # RoBERTa-like tokenizers, add_prefix_space at load), as extraction loaded it.
        tokenizer = backbone.tokenizer
        if tokenizer_fingerprint(tokenizer, word_prefix=word_prefix(tokenizer)) == m.tokenizer.fingerprint:
            backbone.tokenizer_fingerprint = m.tokenizer.fingerprint
        else:
            backbone = load_backbone(source, words_input=True, **options)
    backbone.name = m.model.name
    check_backbone(cache, backbone)
    return backbone


def check_backbone(cache: LayerCache, backbone: Backbone) -> None:
    """Refuse (:class:`CacheMismatchError`) a backbone whose weights or tokenizer are not the cache's."""
    m = cache.manifest
    source = m.model.source or m.model.name
    if backbone.fingerprint != m.model.fingerprint:
        raise CacheMismatchError(
            f"The backbone {m.model.name!r} at {source} now has different weights ({short_digest(backbone.fingerprint)}"
            f") than the model that extracted the cache {cache.path} ({short_digest(m.model.fingerprint)}, revision "
            f"{m.model.revision or 'unknown'}): the cache is from another model; restore that model, or re-extract "
            f"with {call('extract', overwrite=True)}.")
    if backbone.tokenizer_fingerprint != m.tokenizer.fingerprint:
        raise CacheMismatchError(
            f"The tokenizer of {m.model.name!r} at {source} differs from the one that extracted the cache "
            f"{cache.path}; restore that tokenizer, or re-extract with {call('extract', overwrite=True)}.")


def sample_rows(cache: LayerCache, splits: Sequence[str], sample: int, seed: int) -> dict[str, np.ndarray]:
    """Split -> sorted cache rows: ``sample`` of each split (all when it has fewer), drawn with ``seed``."""
    if sample < 1:
        raise ConfigError(f"{option('sample')} must be at least 1, got {sample}.")
    out = {}
    for i, split in enumerate(splits):
        n = cache.num_examples(split)
        rng = np.random.default_rng([seed, i])  # one stream per split: adding a split leaves the others alone
        out[split] = np.sort(rng.choice(n, size=min(sample, n), replace=False))
    return out


@computes
def verify_cache(cache: str | os.PathLike | LayerCache | None = None, *, sample: int = 100, seed: int = 0,
                 split: str | None = None, device: str = "auto", dtype: str | None = None,
                 backbone: Backbone | None = None, allow_pickle: bool = False,
                 progress: Callable[[int], None] | None = None, total: Callable[[int], None] | None = None,
                 device_map: str | None = None, max_memory: Mapping[str, int | str] | None = None
                 ) -> VerifyResult:
    """Re-run the cache's backbone on ``sample`` seeded random examples of each split and compare.

    Args:
        cache: a cache folder or an open :class:`LayerCache` (default: the most recent cache).
        sample, seed: examples per split, and the seed that draws them.
        split: check only this split (default: every split).
        device, dtype: the forward pass (default dtype: the one the manifest records).
        backbone: a backbone already loaded (its fingerprints are checked); default: the manifest's.
        allow_pickle: load a backbone that has only pickle weights, as ``extract --allow-pickle`` did.
        progress: called with the number of examples of each finished batch; ``total`` first, with
            how many there are.
        device_map, max_memory: split a backbone larger than one device, as ``extract`` did (see
            :mod:`~layercache.backbone.placement`).

    Returns a :class:`VerifyResult`: a :class:`StateDiff` per kept state for token states and each
    stored pooling, and ``failure`` (None when passed). A model whose fingerprint differs raises
    :class:`~layercache.errors.CacheMismatchError`.
    """
    with using_cache(cache) as handle:
        def load() -> Backbone:
            return load_cache_backbone(handle, device=device, dtype=dtype, allow_pickle=allow_pickle,
                                       device_map=device_map, max_memory=max_memory)

        return _verify(handle, sample, seed, split, backbone or load, progress, total)


def _verify(cache, sample, seed, split, backbone: Backbone | Callable[[], Backbone], progress, total
            ) -> VerifyResult:
    """``backbone``: loaded, or the call that loads it once the arguments have been checked."""
    started = time.perf_counter()
    m = cache.manifest
    if split is not None:
        cache.require_split(split)
    splits = [split] if split is not None else cache.splits
    rows = sample_rows(cache, splits, sample, seed)  # before the model loads: a bad --sample fails at once
    if isinstance(backbone, Backbone):
        check_backbone(cache, backbone)
    else:
        backbone = backbone()
    storage, pooled_storage = m.storage.dtype, m.storage.stored_pooled_dtype  # float16 pooled beside int8 tokens
    stored_as, pooled_as = codec(storage), codec(pooled_storage)
    projection = cache.projection()  # None unless --project: fresh states are then projected as extraction did
    if projection is not None:
        projection = projection.to(backbone.device)
    forward = str(backbone.dtype).replace("torch.", "")
    keep = list(m.storage.layers)  # index of each kept state among the backbone's states
    names = cache.layer_names
    kinds = (["tokens"] if cache.stores_tokens else []) + [f"pooled:{p}" for p in m.pooling]
    acc = {(k, s): _Accumulator(k, s) for k in kinds for s in names}
    if total is not None:
        total(sum(len(r) for r in rows.values()))
    for name in splits:
        rms = _split_rms(cache, name, names)  # (S,)
        for start in range(0, len(rows[name]), BATCH_EXAMPLES):
            batch = rows[name][start:start + BATCH_EXAMPLES]
            fresh_tokens, fresh_pooled, lengths = _fresh(cache, name, batch, backbone, keep, projection)
            # Extraction clamps what the codec cannot hold, and so does the comparison.
            if stored_as.limit is not None and cache.stores_tokens:
                for j, state in enumerate(names):
                    acc["tokens", state].diff.clamped += _beyond(fresh_tokens[:, j], stored_as.limit)
                fresh_tokens = stored_as.clamp(fresh_tokens)
            if pooled_as.limit is not None:
                for mode in m.pooling:
                    for j, state in enumerate(names):
                        acc[f"pooled:{mode}", state].diff.clamped += _beyond(fresh_pooled[mode][:, j],
                                                                                  pooled_as.limit)
                fresh_pooled = {k: pooled_as.clamp(v) for k, v in fresh_pooled.items()}
            source = cache.example_index(name)[batch]  # (b,) source rows, for the failure sentence
            if cache.stores_tokens:
                stored = torch.from_numpy(np.concatenate(cache.tokens(name, batch)))  # (t, S, D)
                token_row = np.repeat(np.arange(len(batch)), lengths)  # (t,) batch example of each token
                token_pos = np.concatenate([np.arange(n) for n in lengths])  # (t,) token within its example
                for j, state in enumerate(names):
                    acc["tokens", state].add(stored[:, j], fresh_tokens[:, j], rms[j], storage, forward,
                                             name, batch[token_row], source[token_row], token_pos)
            for mode in m.pooling:
                stored = torch.from_numpy(cache.pooled(name, mode, rows=batch))  # (b, S, D)
                for j, state in enumerate(names):
                    acc[f"pooled:{mode}", state].add(stored[:, j], fresh_pooled[mode][:, j], rms[j],
                                                     pooled_storage, forward, name, batch, source, None)
            if progress is not None:
                progress(len(batch))
    diffs = [a.result() for a in acc.values()]
    worst = max(diffs, key=lambda d: d.worst) if diffs else None
    failure = None if worst is None or worst.passed else _failure(worst, storage, forward, m)
    return VerifyResult(cache=str(cache.path), model=m.model.name, storage_dtype=storage, forward_dtype=forward,
                        device=str(backbone.device), examples={k: len(v) for k, v in rows.items()}, rows=diffs,
                        seconds=time.perf_counter() - started, failure=failure,
                        clamped=sum(d.clamped for d in diffs), compared=sum(d.values for d in diffs),
                        overflow_at_extraction=int(m.extraction.overflow or 0))


def _beyond(values: torch.Tensor, limit: float) -> int:
    """How many of ``values`` the storage dtype cannot hold (beyond ±``limit``, or infinite)."""
    return int((values.abs() > limit).sum())


@torch.inference_mode()
def _fresh(cache: LayerCache, split: str, rows: np.ndarray, backbone: Backbone, keep: list[int],
           projection: Projection | None = None):
    """One forward pass over cached rows: token states (t, S, D) and pooled mode -> (b, S, D), float32 on the CPU
    (D = K, the stored coordinates, with the cache's ``projection``)."""
    m = cache.manifest
    examples = cached_examples(cache, split, rows, backbone.tokenizer, causal=backbone.is_causal)
    ids, attn = pad_windows(examples, backbone.tokenizer.pad_token_id)  # (R, W) each
    hidden = backbone.hidden_states(ids, attn)  # L+1 x (R, W, D)
    where = token_index(examples, attn)  # (t,) stored tokens in the flattened R * W
    flat = torch.stack([tokens_of(hidden[i], where, backbone.device) for i in keep], dim=1).float()  # (t, S, D)
    lengths = np.array([ex.n_tokens for ex in examples], dtype=np.int64)  # (b,)
    pooled = pool(flat, torch.from_numpy(lengths).to(flat.device), list(m.pooling),
                  mean_skip_first=m.storage.skips_first_in_mean)  # mode -> (b, S, D)
    if projection is not None:  # as extraction stored them: K coordinates, pooled before projecting
        flat = projection.apply(flat)  # (t, S, K)
        pooled = {k: projection.apply(v) for k, v in pooled.items()}  # (b, S, K)
    return flat.cpu(), {k: v.cpu() for k, v in pooled.items()}, lengths


def _split_rms(cache: LayerCache, split: str, names: list[str]) -> torch.Tensor:
    """(S,) rms of each kept state over the split's tokens, from the manifest (1.0 where it records none)."""
    stats = cache.manifest.splits[split].stats or {}
    values = []
    for name in names:
        rms = (stats.get(name) or {}).get("rms")
        values.append(float(rms) if rms is not None and np.isfinite(rms) and rms > 0 else 1.0)
    return torch.tensor(values, dtype=torch.float32)


class _Accumulator:
    """Running max / mean of one state's differences and the worst one relative to its tolerance."""

    def __init__(self, what: str, state: str) -> None:
        self.diff = StateDiff(what=what, state=state)
        self.sum_abs = 0.0
        self.sum_rel = 0.0

    def add(self, stored: torch.Tensor, fresh: torch.Tensor, rms: torch.Tensor, storage: str, forward: str,
            split: str, rows: np.ndarray, source: np.ndarray, tokens: np.ndarray | None) -> None:
        """Compare ``stored`` and ``fresh`` (n, D); ``rows``, ``source``, ``tokens``: (n,) where each vector is."""
        d = self.diff
        diff = (stored - fresh).abs()  # (n, D)
        ratio = diff / tolerance(storage, forward, fresh, rms)  # (n, D): above 1 fails
        per_vector = ratio.amax(dim=1)  # (n,)
        k = int(per_vector.argmax())
        if float(per_vector[k]) > d.worst or not d.worst_at:
            d.worst = float(per_vector[k])
            d.worst_at = {"split": split, "row": int(rows[k]), "source_row": int(source[k])}
            if tokens is not None:
                d.worst_at["token"] = int(tokens[k])
        d.max_abs = max(d.max_abs, float(diff.max()))
        d.max_rel = max(d.max_rel, float(diff.max() / rms))
        self.sum_abs += float(diff.double().sum())
        self.sum_rel += float(diff.double().sum() / rms)
        d.values += diff.numel()

    def result(self) -> StateDiff:
        """The finished summary."""
        d = self.diff
        if d.values:
            d.mean_abs, d.mean_rel = self.sum_abs / d.values, self.sum_rel / d.values
        return d


def _failure(worst: StateDiff, storage: str, forward: str, m) -> str:
    """One sentence: what differs, where, the likely cause and the fix."""
    at = worst.worst_at
    where = f"split {at['split']!r}, cache row {at['row']} (source row {at['source_row']})"
    if "token" in at:
        where += f", token {at['token']}"
    what = "token states" if worst.what == "tokens" else f"{worst.what.split(':')[1]}-pooled vectors"
    storage = storage if worst.what == "tokens" else m.storage.stored_pooled_dtype  # the dataset's own dtype
    cause = ("a different model revision or tokenizer than the manifest records" if m.model.forward_dtype == forward
             else f"the forward dtype ({forward} now, {m.model.forward_dtype} at extraction; pass "
                  f"{option('dtype', m.model.forward_dtype)}) or a different model revision")
    return (f"The stored {what} of {worst.state} differ from a fresh forward pass at {where} (by up to "
            f"{worst.max_abs:.3g}, {worst.max_rel:.2%} of the state's rms; {worst.worst:.3g}x the {storage} "
            f"tolerance): likely {cause}, or a shard edited after extraction (`layercache info --check` tells "
            f"them apart); re-extract with {call('extract', overwrite=True)}.")
