"""Property-based: mutated manifests, shards and run configs give a correct read or a typed error.

Hypothesis mutates one valid cache (and one run folder) in many ways: a field deleted, replaced by
any JSON value, nudged by ±1 or made negative; a shard truncated, its bytes flipped or zeroed; a
run's ``config.json`` or weights damaged. Every reader a user reaches (``info`` and its
``--check``, ``LayerCache`` reads, the training feed, ``LayerHead.load`` / ``evaluate``) must then
either work or raise a :class:`~layercache.errors.LayercacheError`, which the CLI turns into one
sentence. Any other exception is a bug. Each example runs under a deadline, so a hang fails too.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import layercache as lc
from layercache.errors import LayercacheError
from layercache.report.info import cache_summary
from layercache.store.cache_feed import CacheFeed
from layercache.store.parts import merge_parts, part_name, read_committed

SETTINGS = settings(max_examples=60, deadline=20_000, derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _tags_file(root: Path) -> Path:
    """24 short tagged sentences as a CoNLL file: a token task and its words."""
    conll = root / "tags.conll"
    sentences = [[("the", "O"), ("lamp", "B-OBJ"), ("is", "O"), ("good", "B-ADJ")],
                 [("a", "O"), ("red", "B-ADJ"), ("lamp", "B-OBJ")]] * 12
    conll.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in s) for s in sentences) + "\n")
    return conll


@pytest.fixture(scope="module")
def pristine(tiny_models, tmp_path_factory):
    """A complete token-task + sequence-task cache and a run folder trained on it."""
    root = tmp_path_factory.mktemp("fuzz")
    conll = _tags_file(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        cache = lc.extract(str(tiny_models["bert"]), str(conll), root / "cache", shard_bytes=6_000,
                           batch_tokens=48, pooling=["mean", "first"], progress=False).path
        run = lc.train_head(cache, "scalar", out=root / "run", epochs=1, progress=False).run
    return cache, run


def _stored_tags(tiny_models, root: Path, **storage) -> Path:
    """The tagged sentences extracted into ``root / 'cache'`` in small shards, with ``storage``'s options."""
    conll = _tags_file(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        return lc.extract(str(tiny_models["bert"]), str(conll), root / "cache", shard_bytes=2_000,
                          batch_tokens=48, pooling=["mean", "first"], progress=False, **storage).path


@pytest.fixture(scope="module")
def compressed(tiny_models, tmp_path_factory):
    """The same data stored int8 and projected to 8 of 32 dimensions: scales datasets, a projection section and
    its side file, for the mutations to reach."""
    return _stored_tags(tiny_models, tmp_path_factory.mktemp("fuzz-compressed"), storage_dtype="int8", project=8)


@pytest.fixture(scope="module")
def int4_cache(tiny_models, tmp_path_factory):
    """The same data stored int4 at full width: packed codes, bfloat16 group scales, float16 pooled vectors."""
    return _stored_tags(tiny_models, tmp_path_factory.mktemp("fuzz-int4"), storage_dtype="int4")


def _which(request, which: str) -> Path:
    """The cache a parametrised test mutates: the float16 one, the int8 projected one, or the int4 one."""
    if which == "float16":
        return request.getfixturevalue("pristine")[0]
    return request.getfixturevalue({"int8+project": "compressed", "int4": "int4_cache"}[which])


def _copy_cache(src: Path, dst: Path) -> Path:
    """A private copy: hard links for shards (reads only), so each example costs little."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for path in src.rglob("*"):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        elif path.suffix == ".h5":
            os.link(path, target)
        else:
            shutil.copy2(path, target)
    return dst


def read_everything(cache_dir: Path) -> None:
    """What users do with a cache; any LayercacheError is a clean refusal."""
    with lc.LayerCache.open(cache_dir, allow_incomplete=True) as cache:
        cache_summary(cache)
        cache.damaged_shards()
        cache.projection()
        for split in cache.splits:
            n = cache.num_examples(split)
            if n == 0:
                continue
            rows = sorted({0, n // 2, n - 1})
            cache.tokens(split, rows)
            for mode in cache.manifest.pooling:
                cache.pooled(split, mode, rows=rows)
            for task in cache.tasks:
                cache.labels(split, task.name)
            cache.example_index(split)
            cache.layer_stats(split)
            for batch in cache.iter_batches(split, 8, tasks=[t.name for t in cache.tasks]):
                assert batch.states.shape[0] <= 8
            feed = CacheFeed(cache, split, tasks=[t.name for t in cache.tasks], batch_size=8, source="tokens")
            for batch in feed.epoch(shuffle=True, seed=0):
                assert batch.states_on().shape[0] <= 8  # the values may be anything: they are not checked here


def must_read_or_refuse(action) -> None:
    try:
        action()
    except LayercacheError:
        pass


# --- JSON mutations --------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def _paths(value, prefix=()):
    """Every path (tuple of keys / indices) into a JSON tree, the root excluded."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield prefix + (key,)
        yield from _paths(child, prefix + (key,))


@st.composite
def json_mutation(draw, document):
    paths = list(_paths(document))
    path = draw(st.sampled_from(paths))
    kind = draw(st.sampled_from(["delete", "replace", "nudge", "negate"]))
    new = draw(json_values) if kind == "replace" else None
    return path, kind, new


def apply_mutation(document, mutation):
    path, kind, new = mutation
    document = json.loads(json.dumps(document))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    key, old = path[-1], parent[path[-1]]
    if kind == "delete":
        del parent[key]
    elif kind == "replace":
        parent[key] = new
    elif isinstance(old, (int, float)) and not isinstance(old, bool):
        parent[key] = old + 1 if kind == "nudge" else -abs(old) - 1
    else:
        parent[key] = new
    return document


@pytest.mark.parametrize("which", ["float16", "int8+project", "int4"])
def test_mutated_manifests_are_read_or_refused(request, tmp_path, which):
    cache = _which(request, which)
    manifest = json.loads((cache / "manifest.json").read_text())

    @SETTINGS
    @given(mutation=json_mutation(manifest))
    def check(mutation):
        copy = _copy_cache(cache, tmp_path / "copy")
        (copy / "manifest.json").write_text(json.dumps(apply_mutation(manifest, mutation)))
        must_read_or_refuse(lambda: read_everything(copy))

    check()


# --- shard mutations ---------------------------------------------------------------------------------
shard_mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("flip"), st.lists(st.floats(0.0, 0.999), min_size=1, max_size=8)),
    st.tuples(st.just("zero"), st.tuples(st.floats(0.0, 0.999), st.integers(1, 4096))),
)


def damage(path: Path, mutation) -> bool:
    """Apply ``mutation`` to the shard at ``path``; whether its bytes changed (zeroing zeros does not)."""
    original = path.read_bytes()
    data = bytearray(original)
    kind, where = mutation
    if kind == "truncate":
        del data[int(where * len(data)):]
    elif kind == "flip":
        for at in where:
            data[int(at * len(data))] ^= 0xFF
    else:
        start, size = where
        start = int(start * len(data))
        data[start:start + size] = bytes(len(data[start:start + size]))
    path.unlink()  # break the hard link: the pristine shard stays intact
    path.write_bytes(bytes(data))
    return bytes(data) != original


@pytest.mark.parametrize("which", ["float16", "int8+project", "int4"])
def test_mutated_shards_are_read_or_refused(request, tmp_path, which):
    cache = _which(request, which)
    shards = sorted(p.relative_to(cache) for p in cache.glob("*/shard-*.h5"))

    @SETTINGS
    @given(shard=st.sampled_from(shards), mutation=shard_mutation)
    def check(shard, mutation):
        copy = _copy_cache(cache, tmp_path / "copy")
        changed = damage(copy / shard, mutation)
        must_read_or_refuse(lambda: read_everything(copy))
        with lc.LayerCache.open(copy) as opened:  # the manifest is intact: any change is found
            assert (str(shard) in opened.damaged_shards()) == changed

    check()


def test_a_mutated_projection_file_is_refused(compressed, tmp_path):
    """Every shard was projected with the basis: a changed file is refused where the basis is needed."""
    from layercache.errors import CacheError

    @SETTINGS
    @given(mutation=shard_mutation)
    def check(mutation):
        copy = _copy_cache(compressed, tmp_path / "copy")
        if damage(copy / "projection.safetensors", mutation):
            with lc.LayerCache.open(copy) as opened, pytest.raises(CacheError, match="re-extract with overwrite=True"):
                opened.projection()
        must_read_or_refuse(lambda: read_everything(copy))

    check()


# --- run folder mutations ----------------------------------------------------------------------------
def test_mutated_run_configs_are_loaded_or_refused(pristine, tmp_path):
    cache, run = pristine
    config = json.loads((run / "config.json").read_text())

    @SETTINGS
    @given(mutation=json_mutation(config))
    def check(mutation):
        copy = tmp_path / "run"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(run, copy)
        (copy / "config.json").write_text(json.dumps(apply_mutation(config, mutation)))

        def use():
            head = lc.LayerHead.load(copy)
            with lc.LayerCache.open(cache) as opened:
                head.evaluate(opened, "train")
        must_read_or_refuse(use)

    check()


@pytest.mark.parametrize("keep", [0.0, 0.01, 0.5, 0.99])
def test_truncated_run_weights_are_refused(pristine, tmp_path, keep):
    _, run = pristine
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    weights = copy / "weights.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:int(keep * len(data))])
    with pytest.raises(LayercacheError):
        lc.LayerHead.load(copy)


# --- manifest part mutations -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def with_a_part(pristine, tmp_path_factory):
    """The pristine cache as its writer left it before the merge: the shards listed in a part, not the manifest."""
    cache, _ = pristine
    copy = _copy_cache(cache, tmp_path_factory.mktemp("parts") / "cache")
    manifest = json.loads((copy / "manifest.json").read_text())
    part = {"format_version": manifest["format_version"], "config_hash": manifest["config_hash"], "writer": 0,
            "splits": {}}
    for name, split in manifest["splits"].items():
        part["splits"][name] = split["shards"]
        split.update(shards=[], complete=False, stats={})
    manifest["complete"] = False
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (copy / part_name(0)).write_text(json.dumps(part))
    return copy, part


def test_mutated_manifest_parts_are_merged_or_refused(with_a_part, tmp_path):
    """What a resume (the merge) and ``info`` read of a part: a mutated one merges, or is one refusal."""
    cache, part = with_a_part

    @SETTINGS
    @given(mutation=json_mutation(part))
    def check(mutation):
        copy = _copy_cache(cache, tmp_path / "copy")
        (copy / part_name(0)).write_text(json.dumps(apply_mutation(part, mutation)))
        must_read_or_refuse(lambda: read_committed(copy))
        must_read_or_refuse(lambda: merge_parts(copy, lc.read_manifest(copy)))
        must_read_or_refuse(lambda: read_everything(copy))

    check()
