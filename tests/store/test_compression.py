"""A losslessly compressed cache (``compression="zstd"``): what extraction writes, what every reader serves, the
manifest, its checks and refusals.

The states go through an HDF5 filter (Blosc2 + Zstandard after a byte shuffle for float16 and float32 values,
Zstandard alone for one-byte int8 codes), so nothing can be memory-mapped and every reader takes its h5py path.
Every read must give exactly what the same cache uncompressed gives, and an uncompressed cache (every cache
written before the option) must read, hash and resume as it always did.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from cli_support import assert_refused, invoke

import layercache as lc
from layercache.errors import CacheError, CacheMismatchError, ConfigError
from layercache.live.verify import verify_cache
from layercache.probes.features import read_parts, resolve_task
from layercache.report.info import cache_summary
from layercache.store import compression
from layercache.store.cache_feed import CacheFeed
from layercache.store.writer import ExtractedBatch, ShardWriter

OPTIONS = dict(limit=40, progress=False, pooling=["mean", "first"], shard_bytes=4_000, batch_size=8)
DTYPES = ("float16", "int8")


@pytest.fixture(scope="module")
def caches(tiny_models, tmp_path_factory):
    """The same 40 built-in examples per split through the tiny BERT: (dtype, compression) -> cache folder."""
    root = tmp_path_factory.mktemp("compression")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        for dtype in DTYPES:
            for how in compression.COMPRESSIONS:
                out[dtype, how] = lc.extract(str(tiny_models["bert"]), "builtin", root / f"{dtype}-{how}",
                                             storage_dtype=dtype, compression=how, **OPTIONS).path
    return out


def _extract_again(tiny_models, path, **changed):
    return lc.extract(str(tiny_models["bert"]), "builtin", path, **{**OPTIONS, "storage_dtype": "float16", **changed})


# --- what is written -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_state_dataset_goes_through_its_filter_and_the_shards_are_smaller(caches, dtype):
    plain, packed = (lc.LayerCache.open(caches[dtype, how]) for how in compression.COMPRESSIONS)
    assert "compression" not in plain.manifest.storage.to_json()  # recorded only when there is one
    assert packed.manifest.storage.to_json()["compression"] == "zstd"
    filters = {}
    for info in packed.split_info("train").shards:
        with h5py.File(caches[dtype, "zstd"] / info.file) as h:
            def note(name, ds):
                if isinstance(ds, h5py.Dataset):
                    plist = ds.id.get_create_plist()
                    filters[name] = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
            h.visititems(note)
    values = compression.ZSTD_FILTER if dtype == "int8" else compression.BLOSC2_FILTER  # one byte: no shuffle
    assert filters["hidden"] == (values,)
    assert filters["pooled/mean"] == filters["pooled/first"] == (compression.BLOSC2_FILTER,)  # float16 beside int8
    if dtype == "int8":
        assert filters["scales/hidden"] == (compression.BLOSC2_FILTER,)  # float32 scales: shuffled
    assert {name for name, ids in filters.items() if ids} == {n for n in filters if compression.is_state_dataset(n)}
    for a, b in zip(plain.split_info("train").shards, packed.split_info("train").shards):
        assert (a.first_row, a.n_examples, a.n_tokens) == (b.first_row, b.n_examples, b.n_tokens)  # the same cut
        assert b.bytes < a.bytes


def test_the_filter_ids_are_hdf5plugins():
    import hdf5plugin

    assert (compression.BLOSC2_FILTER, compression.ZSTD_FILTER) == (hdf5plugin.BLOSC2_ID, hdf5plugin.ZSTD_ID)


# --- what is read ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_reader_serves_the_uncompressed_values(caches, dtype):
    plain, packed = (lc.LayerCache.open(caches[dtype, how]) for how in compression.COMPRESSIONS)
    assert plain.mapped_states("train", 0) is not None and packed.mapped_states("train", 0) is None
    rows = [39, 0, 17, 5, 17]  # several shards, any order, a repeat
    n = packed.num_examples("train")
    for x, y in zip(plain.tokens("train", rows), packed.tokens("train", rows)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(plain.tokens("train", range(n), layers=[2, 0])[7],
                                  packed.tokens("train", range(n), layers=[2, 0])[7])
    for mode in ("mean", "first"):
        np.testing.assert_array_equal(plain.pooled("train", mode), packed.pooled("train", mode))
        np.testing.assert_array_equal(plain.pooled("train", mode, rows=rows[:4]),
                                      packed.pooled("train", mode, rows=rows[:4]))
        assert torch.equal(plain.pooled_stored("train", mode, layers=[1]), packed.pooled_stored("train", mode,
                                                                                                 layers=[1]))
    for layer in ("embeddings", "layer_2"):
        for x, y in zip(plain.layer_tokens("train", layer), packed.layer_tokens("train", layer)):
            np.testing.assert_array_equal(x, y)
    for source, tasks in (("tokens", None), ("pooled:first", ["topic"])):
        a, b = (c.batch("train", rows, source=source, tasks=tasks) for c in (plain, packed))
        assert torch.equal(a.states, b.states) and torch.equal(a.mask, b.mask)
    for a, b in zip(plain.iter_batches("validation", 6, shuffle=True, seed=2),
                    packed.iter_batches("validation", 6, shuffle=True, seed=2)):
        assert torch.equal(a.states, b.states) and np.array_equal(a.rows, b.rows)
    a, b = (c.torch_dataset("train", layers=["layer_1"]).collate(rows) for c in (plain, packed))
    assert torch.equal(a.states, b.states)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep_bytes", [None, 0])
def test_the_feed_serves_the_same_epochs_streamed_or_kept(caches, dtype, keep_bytes):
    """The cache feed reads a compressed shard through h5py, block by block (kept across epochs, or streamed
    again each epoch when ``keep_bytes`` is 0): the same batches as the memory map of the uncompressed twin."""
    plain, packed = (lc.LayerCache.open(caches[dtype, how]) for how in compression.COMPRESSIONS)
    sparse = np.arange(1, 40, 3)  # rows far apart: a run each, several inside one chunk
    feeds = [CacheFeed(c, "train", tasks=["topic", "negation_scope"], rows=sparse, batch_size=4, block_bytes=20_000,
                       keep_bytes=keep_bytes, layers=["layer_2", "embeddings"]) for c in (plain, packed)]
    assert len(feeds[1]._blocks) > 1 and feeds[1]._maps == [None] * len(feeds[1]._maps)
    for epoch in range(2):
        for a, b in zip(*(f.epoch(shuffle=True, seed=epoch) for f in feeds), strict=True):
            assert np.array_equal(a.rows, b.rows) and torch.equal(a.states, b.states)
            assert (a.scales is None) == (b.scales is None) and (a.scales is None or torch.equal(a.scales, b.scales))
            for task in a.labels:
                assert torch.equal(a.labels[task], b.labels[task])


@pytest.mark.parametrize("dtype", DTYPES)
def test_probe_features_are_the_uncompressed_ones(caches, dtype):
    """The probes' gathers: word states (from the memory map uncompressed, ``layer_tokens`` compressed), token
    means and pooled vectors."""
    plain, packed = (lc.LayerCache.open(caches[dtype, how]) for how in compression.COMPRESSIONS)
    parts = [np.arange(0, 40, 2), np.arange(1, 40, 2)]
    for task, source in (("negation_scope", "tokens"), ("topic", "tokens"), ("topic", "pooled:mean")):
        spec = resolve_task(plain, task)
        a, b = (read_parts(c, "train", spec, source, [2, 0], parts, want_types=True) for c in (plain, packed))
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.X, y.X)
            np.testing.assert_array_equal(x.y, y.y)
            assert x.types == y.types


def test_a_head_and_a_probe_learn_the_same_from_either(caches, one_torch_thread):
    results = {}
    for how in compression.COMPRESSIONS:
        cache = lc.LayerCache.open(caches["float16", how])
        head = lc.LayerHead(mixer="scalar", epochs=2, seed=0, tasks=["topic"], progress=False).fit(cache)
        metrics, _ = head.evaluate(cache, "validation")
        probes = lc.LinearProbes(task="topic").fit(cache)
        results[how] = (metrics["topic"], probes.scores_.tolist())
    assert results["none"] == results["zstd"]


def test_verify_and_the_checksums_pass_on_a_compressed_cache(caches):
    result = verify_cache(caches["float16", "zstd"], sample=8)
    assert result.passed, result.failure
    assert lc.LayerCache.open(caches["int8", "zstd"]).damaged_shards() == []


def test_reading_an_uncompressed_cache_never_imports_hdf5plugin(caches):
    code = (f"import sys, layercache as lc\ncache = lc.LayerCache.open({str(caches['float16', 'none'])!r})\n"
            "cache.tokens('train', [0, 5]); cache.pooled('train'); cache.batch('train', [1, 2])\n"
            "print('hdf5plugin' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


# --- the manifest, resumes and repairs -------------------------------------------------------------------
def test_an_uncompressed_cache_keeps_its_hash_and_reads_none(caches, tiny_models, tmp_path):
    """No key, the hash of a cache written before the option: the same command finds it complete; a manifest
    that spells ``none`` out reads the same."""
    copy = tmp_path / "cache"
    shutil.copytree(caches["float16", "none"], copy)
    result = _extract_again(tiny_models, copy)
    assert result.already_complete
    manifest = json.loads((copy / "manifest.json").read_text())
    assert "compression" not in manifest["storage"]
    manifest["storage"]["compression"] = "none"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    cache = lc.LayerCache.open(copy)
    assert cache.manifest.storage.stored_compression == "none" and cache.manifest.storage.compression is None
    np.testing.assert_array_equal(cache.pooled("train"), lc.LayerCache.open(caches["float16", "zstd"]).pooled("train"))


@pytest.mark.parametrize("existing, asked", [("none", "zstd"), ("zstd", "none")])
def test_a_resume_with_another_compression_is_refused(caches, tiny_models, tmp_path, existing, asked):
    copy = tmp_path / "cache"
    shutil.copytree(caches["float16", existing], copy)
    with pytest.raises(CacheMismatchError, match=r"made with a different compression \(compression=\.\.\.\); pass "
                                                 r"overwrite=True to replace it"):
        _extract_again(tiny_models, copy, compression=asked)


def test_an_interrupted_compressed_cache_resumes_to_the_same_values(caches, tiny_models, tmp_path):
    """The last shards of a split dropped, as a run stopped before them leaves it: the same call writes them."""
    copy = tmp_path / "cache"
    shutil.copytree(caches["float16", "zstd"], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    dropped = manifest["splits"]["train"]["shards"][2:]
    manifest["splits"]["train"]["shards"] = manifest["splits"]["train"]["shards"][:2]
    manifest["splits"]["train"]["complete"] = manifest["complete"] = False
    (copy / "manifest.json").write_text(json.dumps(manifest))
    for shard in dropped:
        (copy / shard["file"]).unlink()
    result = _extract_again(tiny_models, copy, compression="zstd")
    assert result.resumed and result.manifest.complete
    done, reference = lc.LayerCache.open(copy), lc.LayerCache.open(caches["float16", "zstd"])
    assert [s.bytes for s in done.split_info("train").shards] == [s.bytes for s in reference.split_info(
        "train").shards]
    np.testing.assert_array_equal(np.concatenate(done.tokens("train", range(40))),
                                  np.concatenate(reference.tokens("train", range(40))))


def test_repair_re_extracts_a_damaged_compressed_shard(caches, tiny_models, tmp_path):
    copy = tmp_path / "cache"
    shutil.copytree(caches["float16", "zstd"], copy)
    info = lc.LayerCache.open(copy).split_info("train").shards[1]
    data = bytearray((copy / info.file).read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte inside the compressed states
    (copy / info.file).write_bytes(bytes(data))
    assert lc.LayerCache.open(copy).damaged_shards() == [info.file]
    result = _extract_again(tiny_models, copy, compression="zstd", repair=True)
    assert result.repaired == [info.file]
    assert (copy / info.file).read_bytes() == (caches["float16", "zstd"] / info.file).read_bytes()


def test_a_shard_stored_otherwise_than_the_manifest_says_is_refused(caches, tmp_path):
    copy = tmp_path / "cache"
    shutil.copytree(caches["float16", "zstd"], copy)
    shard = lc.LayerCache.open(copy).split_info("train").shards[0].file
    with h5py.File(copy / shard, "r+") as h:  # the values as they were, written without the filter
        values = h["hidden"][:]
        del h["hidden"]
        h.create_dataset("hidden", data=values, chunks=(512, 1, values.shape[2]),
                         maxshape=(None, *values.shape[1:])).attrs["dtype"] = "float16"
    with pytest.raises(CacheError, match="stores hidden with compression none, the manifest says zstd: it is "
                                         "damaged or from another cache"):
        lc.LayerCache.open(copy).tokens("train", [0])


# --- refusals --------------------------------------------------------------------------------------------
def test_an_unknown_compression_is_refused_before_anything_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"compression='lz4' is not known; choose one of none, zstd\."):
        lc.extract("no-such-model", "builtin", tmp_path / "c", compression="lz4", progress=False)
    assert not (tmp_path / "c").exists()


def test_without_hdf5plugin_compression_is_refused_in_one_sentence(caches, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "hdf5plugin", None)  # import hdf5plugin raises ImportError
    with pytest.raises(ConfigError, match=r"compression='zstd' needs the hdf5plugin package; install it with pip "
                                          r"install 'layercache\[compress\]', or pass compression='none'\."):
        lc.extract("no-such-model", "builtin", tmp_path / "c", compression="zstd", progress=False)
    cache = lc.LayerCache.open(caches["float16", "zstd"])  # its manifest reads, and info shows it
    assert cache_summary(cache)["storage"]["compression"] == "zstd"
    with pytest.raises(CacheError, match=r"stores its states compressed \(zstd\), which needs the hdf5plugin package "
                                         r"to read; install it with pip install 'layercache\[compress\]'\."):
        cache.pooled("train")
    lc.LayerCache.open(caches["float16", "none"]).pooled("train")  # an uncompressed cache needs nothing


# --- the writer ------------------------------------------------------------------------------------------
def test_vectors_appended_a_batch_at_a_time_are_compressed_once(tmp_path):
    """Pooled vectors of a wide model with many states: a row of their chunks (64 examples, every state: 8 MiB) is
    more than HDF5's default 1 MiB chunk cache. Kept whole until full, each chunk is compressed and written once;
    evicted half full, it is written, read back and written again at later batches, leaving holes in the file
    (about 80 KiB here)."""
    S, D, n, b = 33, 2048, 130, 24
    rng = np.random.default_rng(0)
    pooled = (rng.standard_normal((n, S, D)) * 0.3).astype(np.float16)
    writer = ShardWriter(tmp_path / "shard-00000.h5", n_states=S, dim=D, dtype="float16", store_tokens=False,
                         pooling=["mean"], tasks=[], first_row=0, first_batch=0, compression="zstd")
    for start in range(0, n, b):
        rows = slice(start, min(start + b, n))
        count = rows.stop - rows.start
        writer.append(ExtractedBatch(hidden=None, lengths=np.full(count, 3), input_ids=np.zeros(3 * count, np.int32),
                                     word_ids=None, pooled={"mean": pooled[rows]}, labels={},
                                     example_index=np.arange(rows.start, rows.stop), stat_sum=np.zeros((S, D)),
                                     stat_sumsq=np.zeros((S, D)), stat_count=3 * count))
    info = writer.commit()
    stored = {}
    with h5py.File(tmp_path / "shard-00000.h5") as h:
        np.testing.assert_array_equal(h["pooled/mean"][:], pooled)
        h.visititems(lambda name, ds: stored.update({name: ds.id.get_storage_size()})
                     if isinstance(ds, h5py.Dataset) else None)
    assert stored["pooled/mean"] < 0.95 * pooled.nbytes
    assert info.bytes - sum(stored.values()) < 32 << 10  # the file is its datasets and their metadata, no holes


# --- the command line ------------------------------------------------------------------------------------
def test_the_command_line_writes_shows_and_refuses_compression(tiny_models, tmp_path, monkeypatch):
    out = tmp_path / "cache"
    result = invoke("extract", tiny_models["bert"], "builtin", "--out", out, "--limit", 12, "--compression", "zstd",
                    "--quiet")
    assert result.exit_code == 0, result.output
    assert lc.LayerCache.open(out).manifest.storage.compression == "zstd"
    shown = invoke("info", out)
    assert shown.exit_code == 0 and "compressed losslessly (zstd)" in " ".join(shown.output.split())
    assert_refused(invoke("extract", tiny_models["bert"], "builtin", "--out", tmp_path / "other", "--limit", 12,
                          "--compression", "lz4"), "--compression 'lz4' is not known; choose one of none, zstd.")
    assert_refused(invoke("extract", tiny_models["bert"], "builtin", "--out", out, "--limit", 12, "--quiet"),
                   "made with a different compression (--compression)")
    monkeypatch.setitem(sys.modules, "hdf5plugin", None)
    assert_refused(invoke("extract", tiny_models["bert"], "builtin", "--out", tmp_path / "other", "--limit", 12,
                          "--compression", "zstd"),
                   "--compression zstd needs the hdf5plugin package; install it with pip install "
                   "'layercache[compress]', or pass --compression none.")
