"""Where a head's training states came from, and refusing states from anywhere else.

A fitted head records the identity of its training cache (:func:`cache_identity`, the typed section
:class:`~.run_files.RecordedCache` of its run's config): the backbone's and tokenizer's fingerprints,
the hidden size, the states, the dataset. A cache or a live backbone that differs in what the
weights depend on is refused, naming what differs, because the head's weights would mean nothing
there.
"""

from __future__ import annotations

from ...core.option_names import option
from ...core.tasks import LabelTask
from ...errors import CacheMismatchError
from ...store.reader import LayerCache
from .run_files import RecordedCache


def cache_identity(cache: LayerCache) -> RecordedCache:
    """What a head must agree with: backbone and tokenizer fingerprints, width, states, dataset.

    The maximum length and window stride (recorded since the live bundle) tell a live backbone how
    to cut texts exactly as the cache did; a projected cache's states are recorded with the checksum of
    their projection.
    """
    m = cache.manifest
    return RecordedCache(model=m.model.name, model_fingerprint=m.model.fingerprint,
                         tokenizer_fingerprint=m.tokenizer.fingerprint, hidden_size=m.hidden_size,
                         final_norm=m.model.final_norm, dataset=m.dataset.name, layer_names=m.layer_names,
                         storage_dtype=m.storage.dtype, config_hash=m.config_hash, max_length=m.tokenizer.max_length,
                         stride=m.tokenizer.stride, records_text_settings=True,
                         projection=m.side_files["projection"].checksum if m.storage.project else None)


def cache_mean_skip_first(cache: LayerCache) -> bool:
    """Whether the cache's pooled means leave out each example's first token (older caches: no)."""
    return cache.manifest.storage.skips_first_in_mean


def short_digest(value) -> str:
    """``xxh3_128-files:0123456789ab…`` -> ``0123456789ab``: the part of a fingerprint that tells two apart."""
    return str(value).rpartition(":")[2][:12]


def check_cache_matches(cache: LayerCache, trained_on: RecordedCache, layer_names: list[str], source: str,
                        mean_skip_first: bool, tasks: list[LabelTask]) -> None:
    """Refuse ``cache`` unless a head trained on ``trained_on`` (its :func:`cache_identity`) reads it correctly.

    The head reads the states ``layer_names`` from ``source``, pools means with or without the first
    token (``mean_skip_first``) and predicts ``tasks``; the error names what differs.
    """
    theirs = cache_identity(cache)
    what = (("model_fingerprint", "different backbone weights", trained_on.model_fingerprint, theirs.model_fingerprint),
            ("tokenizer_fingerprint", "a different tokenizer", trained_on.tokenizer_fingerprint,
             theirs.tokenizer_fingerprint),
            ("hidden_size", "a different hidden size", trained_on.hidden_size, theirs.hidden_size))
    for key, label, recorded, found in what:
        if recorded != found:
            raise CacheMismatchError(
                f"The cache {cache.path} was extracted with {label} ({theirs.model!r}, "
                f"{key} {short_digest(found)}) than this head was trained on ({trained_on.model!r}, "
                f"{short_digest(recorded)}); extract the data with the head's backbone.")
    if trained_on.projection != theirs.projection:
        trained = option("project") if trained_on.projection else "none"
        raise CacheMismatchError(
            f"The cache {cache.path} stores its states in {'another' if theirs.projection else 'no'} "
            f"projection than this head was trained on ({trained}); score it on a cache extracted the same way "
            f"(the same {option('project')} on the same data), or retrain.")
    missing = [n for n in layer_names if n not in cache.layer_names]
    if missing:
        raise CacheMismatchError(f"The cache {cache.path} lacks the state(s) {', '.join(missing)} this head "
                                 f"reads; re-extract without {option('layers')} (or with those layers).")
    if source == "pooled:mean" and cache_mean_skip_first(cache) != mean_skip_first:
        # The model's own mean pooling follows its training cache; the pooled vectors read here would not.
        how = {True: "without each example's first token", False: "over every token"}
        raise CacheMismatchError(
            f"The cache {cache.path} holds means {how[cache_mean_skip_first(cache)]} but this head was trained "
            f"on means {how[mean_skip_first]}; score it on a cache extracted the same way, or train "
            f"it with {option('source', 'tokens')}.")
    known = {t.name: t for t in cache.tasks}
    for t in tasks:
        other = known.get(t.name)
        if other is not None and (other.kind != t.kind or other.label_names != t.label_names):
            raise CacheMismatchError(
                f"Task {t.name!r} in the cache has labels {other.label_names} ({other.kind}) but the head "
                f"predicts {t.label_names} ({t.kind}); class ids would not line up.")


def check_backbone_matches(backbone, trained_on: RecordedCache) -> None:
    """Refuse a live ``backbone`` whose weights or tokenizer differ from those of ``trained_on``'s cache."""
    for value, mine, label in ((backbone.fingerprint, trained_on.model_fingerprint, "weights"),
                               (backbone.tokenizer_fingerprint, trained_on.tokenizer_fingerprint, "tokenizer")):
        if mine != value:
            raise CacheMismatchError(
                f"The backbone {backbone.name!r} has different {label} than the one this head was trained on "
                f"({trained_on.model!r}); load that backbone.")
