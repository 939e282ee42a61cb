"""Where a head's training states came from, and refusing states from anywhere else.

A fitted head records the identity of its training cache (:func:`cache_identity`): the backbone's
and tokenizer's fingerprints, the hidden size, the states, the dataset. A cache or a live backbone
that differs in what the weights depend on is refused, naming what differs, because the head's
weights would mean nothing there.
"""

from __future__ import annotations

from ...core.option_names import option
from ...core.tasks import LabelTask
from ...errors import CacheMismatchError
from ...store.reader import LayerCache


def cache_identity(cache: LayerCache) -> dict:
    """What a head must agree with: backbone and tokenizer fingerprints, width, states, dataset.

    The maximum length and window stride (recorded since the live bundle) tell a live backbone how
    to cut texts exactly as the cache did.
    """
    m = cache.manifest
    return {"model": m.model.name, "model_fingerprint": m.model.fingerprint,
            "tokenizer_fingerprint": m.tokenizer.fingerprint, "hidden_size": m.hidden_size,
            "final_norm": m.model.final_norm, "dataset": m.dataset.name,
            "layer_names": m.layer_names, "storage_dtype": m.storage.dtype, "config_hash": m.config_hash,
            "max_length": m.tokenizer.max_length, "stride": m.tokenizer.stride,
            **({"projection": m.side_files["projection"].checksum} if m.storage.project else {})}


def cache_mean_skip_first(cache: LayerCache) -> bool:
    """Whether the cache's pooled means leave out each example's first token (older caches: no)."""
    return cache.manifest.storage.skips_first_in_mean


def short_digest(value) -> str:
    """``xxh3_128-files:0123456789ab…`` -> ``0123456789ab``: the part of a fingerprint that tells two apart."""
    return str(value).rpartition(":")[2][:12]


def check_cache_matches(cache: LayerCache, trained_on: dict, layer_names: list[str], source: str,
                        mean_skip_first: bool, tasks: list[LabelTask]) -> None:
    """Refuse ``cache`` unless a head trained on ``trained_on`` (its :func:`cache_identity`) reads it correctly.

    The head reads the states ``layer_names`` from ``source``, pools means with or without the first
    token (``mean_skip_first``) and predicts ``tasks``; the error names what differs.
    """
    theirs = cache_identity(cache)
    what = {"model_fingerprint": "different backbone weights", "tokenizer_fingerprint": "a different tokenizer",
            "hidden_size": "a different hidden size"}
    for key, label in what.items():
        if trained_on[key] != theirs[key]:
            raise CacheMismatchError(
                f"The cache {cache.path} was extracted with {label} ({theirs['model']!r}, "
                f"{key} {short_digest(theirs[key])}) than this head was trained on ({trained_on['model']!r}, "
                f"{short_digest(trained_on[key])}); extract the data with the head's backbone.")
    if trained_on.get("projection") != theirs.get("projection"):
        trained = option("project") if trained_on.get("projection") else "none"
        raise CacheMismatchError(
            f"The cache {cache.path} stores its states in {'another' if theirs.get('projection') else 'no'} "
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


def check_backbone_matches(backbone, trained_on: dict) -> None:
    """Refuse a live ``backbone`` whose weights or tokenizer differ from those of ``trained_on``'s cache."""
    for key, value, label in (("model_fingerprint", backbone.fingerprint, "weights"),
                              ("tokenizer_fingerprint", backbone.tokenizer_fingerprint, "tokenizer")):
        if trained_on[key] != value:
            raise CacheMismatchError(
                f"The backbone {backbone.name!r} has different {label} than the one this head was trained on "
                f"({trained_on['model']!r}); load that backbone.")
