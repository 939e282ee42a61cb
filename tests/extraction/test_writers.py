"""Several writers fill one cache: each owns a share of the batches and commits under its own manifest part,
one merge lists them; the cache equals a single writer's, whatever the number of writers and whoever stopped."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import layercache as lc
import layercache.extraction.steps as steps
from layercache.errors import CacheError
from layercache.extraction.housekeeping import locked_output
from layercache.extraction.job import ExtractResult, join_job, prepare_job
from layercache.extraction.run import assign_shares, merge_shares, write_share
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec
from layercache.store.manifest import FORMAT_VERSION, read_manifest
from layercache.store.parts import merge_parts, part_files, part_name, read_committed

POOLING = ("mean", "last")
OPTIONS = dict(shard_bytes=12_000, batch_tokens=96, pooling=list(POOLING))


BUILTIN_SIZES = {"train": 48, "validation": 16}
"""The builtin splits these tests extract (the ``small_builtin`` fixture of tests/conftest.py)."""


@pytest.fixture
def single(tiny_models, tmp_path, small_builtin) -> Path:
    """The reference: the same extraction by one process (one writer)."""
    return lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "single", progress=False, **OPTIONS).path


def with_writers(model: Path, out: Path, n: int, order=None, merge: bool = True, **storage_options):
    """Prepare, write every share of ``n`` writers in ``order`` (one process plays them all), merge;
    ``storage_options``: more of :class:`StorageSpec` (``storage_dtype``)."""
    data = DataSpec(dataset="builtin")
    storage = StorageSpec(shard_bytes=OPTIONS["shard_bytes"], pooling=POOLING, **storage_options)
    with locked_output(out):
        job = prepare_job(str(model), data, storage, BatchSpec(batch_tokens=OPTIONS["batch_tokens"]), out,
                          list(POOLING), overwrite=False, repair=False, allow_pickle=False, progress=False)
        if isinstance(job, ExtractResult):
            return job.manifest
        shares = assign_shares(job.manifest, job.plans, n)
        for k in (range(n) if order is None else order):
            write_share(job, shares[k], progress=False)
        return merge_shares(job) if merge else job


def contents(cache: Path) -> dict[str, np.ndarray]:
    """Every split's datasets, shards concatenated in row order (offsets as lengths), for comparing caches."""
    manifest = read_manifest(cache)
    out: dict[str, list[np.ndarray]] = {}
    for name, split in manifest.splits.items():
        for shard in split.shards:
            with h5py.File(cache / shard.file, "r") as h:
                def keep(key, obj, name=name, h=h):
                    if isinstance(obj, h5py.Dataset) and not key.startswith("stats"):
                        values = np.diff(obj[:]) if key.endswith("offsets") else obj[:]
                        out.setdefault(f"{name}/{key}", []).append(values)
                h.visititems(keep)
    return {key: np.concatenate(parts) for key, parts in out.items()}


def assert_same_cache(a: Path, b: Path) -> None:
    left, right = contents(a), contents(b)
    assert left.keys() == right.keys()
    for key in left:
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)
    ma, mb = read_manifest(a), read_manifest(b)
    assert ma.complete and mb.complete and ma.config_hash == mb.config_hash
    for name in ma.splits:
        for layer, stats in ma.splits[name].stats.items():
            for key, value in stats.items():  # sums over other shard boundaries: the last digits may differ
                assert value == pytest.approx(mb.splits[name].stats[layer][key], rel=1e-9, abs=1e-9)
    assert not part_files(a) and not part_files(b)


def shard_names(cache: Path) -> list[str]:
    return [s.file for split in read_manifest(cache).splits.values() for s in split.shards]


# --- shares -----------------------------------------------------------------------------------------
def test_shares_cover_every_batch_once_in_order_balanced_by_tokens(tiny_models, tmp_path, small_builtin):
    job = with_writers(tiny_models["bert"], tmp_path / "c", 1, order=[], merge=False)
    for n in (1, 2, 3, 7):
        shares = assign_shares(job.manifest, job.plans, n)
        assert [s.writer for s in shares] == list(range(n))
        order = [(name, b) for s in shares for name, batches in s.batches.items() for b in batches]
        expected = [(name, b) for name, plan in job.plans.items() for b in range(len(plan.batches))]
        assert order == expected  # contiguous, in split and batch order, every batch once
        tokens = [sum(job.plans[name].batch_tokens(b) for name, bs in s.batches.items() for b in bs) for s in shares]
        biggest = max(plan.batch_tokens(b) for plan in job.plans.values() for b in range(len(plan.batches)))
        assert max(tokens) - min(tokens) <= 2 * biggest, tokens


# --- several writers, one cache ----------------------------------------------------------------------
def test_two_writers_in_any_order_write_the_single_writers_cache(tiny_models, tmp_path, small_builtin, single):
    out = tmp_path / "two"
    manifest = with_writers(tiny_models["bert"], out, 2, order=[1, 0])
    assert manifest.complete and manifest.format_version == FORMAT_VERSION
    assert_same_cache(out, single)
    # Shards are named after their first batch: the second writer's first shard starts mid-split.
    for name in shard_names(out):
        shard = next(s for split in manifest.splits.values() for s in split.shards if s.file == name)
        assert name.endswith(f"shard-{shard.first_batch:05d}.h5")
    assert set(shard_names(out)) != set(shard_names(single))
    with lc.LayerCache.open(out) as a, lc.LayerCache.open(single) as b:
        for split in a.splits:
            np.testing.assert_array_equal(a.pooled(split, "mean"), b.pooled(split, "mean"))


def test_writers_of_an_int4_cache_write_the_single_writers_cache(tiny_models, tmp_path, small_builtin):
    """Packed codes and their group scales are per token and state: writers that split the batches between them
    write the codes, scales and pooled vectors one writer writes."""
    single = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "single", progress=False,
                        storage_dtype="int4", **OPTIONS).path
    out = tmp_path / "three"
    manifest = with_writers(tiny_models["bert"], out, 3, order=[2, 0, 1], storage_dtype="int4")
    assert manifest.storage.dtype == "int4" and len(shard_names(out)) > 3
    assert_same_cache(out, single)
    written = contents(out)
    assert written["train/hidden"].dtype == np.uint8 and written["train/scales/hidden"].dtype == np.uint16


def test_a_writer_that_joins_a_prepared_run_writes_its_share_and_nothing_else(tiny_models, tmp_path,
                                                                              small_builtin, single):
    """What each process of a distributed run does: one prepares (under the lock), the others join read-only."""
    out = tmp_path / "joined"
    data, storage = DataSpec(dataset="builtin"), StorageSpec(shard_bytes=OPTIONS["shard_bytes"], pooling=POOLING)
    batching = BatchSpec(batch_tokens=OPTIONS["batch_tokens"])
    with locked_output(out):
        job = prepare_job(str(tiny_models["bert"]), data, storage, batching, out, list(POOLING), overwrite=False,
                          repair=False, allow_pickle=False, progress=False)
        before = sorted(p.name for p in out.rglob("*"))
        other = join_job(str(tiny_models["bert"]), data, storage, batching, out, list(POOLING), allow_pickle=False)
        assert sorted(p.name for p in out.rglob("*")) == before  # joining writes nothing
        assert other.manifest.config_hash == job.manifest.config_hash and len(other.held) == 0
        shares = assign_shares(other.manifest, other.plans, 2)
        assert shares == assign_shares(job.manifest, job.plans, 2)  # each writer computes the same cut
        write_share(other, shares[1], progress=False)
        assert [p.name for p in part_files(out)] == [part_name(1)]
        write_share(job, shares[0], progress=False)
        merge_shares(job)
    assert_same_cache(out, single)

    with pytest.raises(lc.CacheMismatchError, match="every writer must run the same command"):
        join_job(str(tiny_models["bert"]), data, StorageSpec(shard_bytes=OPTIONS["shard_bytes"], pooling=("mean",)),
                 batching, out, ["mean"], allow_pickle=False)


def test_a_stopped_writer_loses_nothing_and_any_number_of_writers_resumes(tiny_models, tmp_path, small_builtin,
                                                                        single, monkeypatch):
    out = tmp_path / "stopped"
    original, seen = steps.run_batch, []

    def fails_in_the_second_share(*args, **kwargs):
        seen.append(kwargs["split"])
        if len(seen) == 9:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(steps, "run_batch", fails_in_the_second_share)
        with pytest.raises(KeyboardInterrupt):
            with_writers(tiny_models["bert"], out, 3, order=[0, 1, 2])
    # Nobody merged: the manifest lists nothing yet, the parts hold what writers 0 and 1 committed.
    assert [p.name for p in part_files(out)][:1] == [part_name(0)]
    assert sum(len(s.shards) for s in read_manifest(out).splits.values()) == 0
    committed = read_committed(out)
    assert 0 < sum(len(s.shards) for s in committed.splits.values())
    assert not committed.complete
    before = {s.file: s.checksum for split in committed.splits.values() for s in split.shards}

    for n, copy in ((1, "one"), (2, "two")):  # resumed by one writer, and by two
        resumed = tmp_path / copy
        os.system(f"cp -a {out} {resumed}")
        calls = []
        with monkeypatch.context() as mp:
            mp.setattr(steps, "run_batch", lambda *a, **k: calls.append(1) or original(*a, **k))
            if n == 1:
                result = lc.extract(str(tiny_models["bert"]), "builtin", resumed, progress=False, **OPTIONS)
                assert result.resumed
            else:
                with_writers(tiny_models["bert"], resumed, n)
        assert_same_cache(resumed, single)
        after = {s.file: s.checksum for split in read_manifest(resumed).splits.values() for s in split.shards}
        assert before.items() <= after.items()  # every committed shard kept as it was, none redone
        planned = sum(split.n_batches for split in committed.splits.values())
        assert len(calls) == planned - sum(s.n_batches for split in committed.splits.values() for s in split.shards)


def test_a_merge_killed_before_it_deleted_the_parts_merges_again_to_the_same_manifest(tiny_models, tmp_path,
                                                                                    small_builtin):
    out = tmp_path / "c"
    job = with_writers(tiny_models["bert"], out, 2, merge=False)
    parts = {p.name: p.read_bytes() for p in part_files(out)}
    assert len(parts) == 2
    merge_parts(out, job.manifest)
    first = json.loads((out / "manifest.json").read_text())
    for name, data in parts.items():  # as if killed between the manifest write and the deletions
        (out / name).write_bytes(data)
    assert merge_parts(out, read_manifest(out)) == 0
    again = json.loads((out / "manifest.json").read_text())
    first.pop("updated_at"), again.pop("updated_at")
    assert again == first and not part_files(out)


# --- hostile parts ---------------------------------------------------------------------------------------
def _plant(out: Path, how: str) -> None:
    path = out / part_name(5)
    good = json.loads(next(iter(part_files(out))).read_text()) if part_files(out) else None
    if how == "link":
        (out.parent / "elsewhere.json").write_text("{}")
        path.symlink_to(out.parent / "elsewhere.json")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "garbage":
        path.write_text("{not json")
    elif how == "schema":
        path.write_text(json.dumps({"format_version": FORMAT_VERSION, "config_hash": "x", "writer": 5,
                                    "splits": {"train": [{"file": "../../etc/passwd"}]}}))
    elif how == "other configuration":
        path.write_text(json.dumps({**good, "writer": 5, "config_hash": "0" * 64}))
    elif how == "conflict":  # a shard another writer lists with other content
        path.write_text(json.dumps({**good, "writer": 5}).replace('"checksum": "xxh3_128:', '"checksum": "xxh3_128:f'
                                                                  ).replace('f"', '"'))
        data = json.loads(path.read_text())
        for shards in data["splits"].values():
            for shard in shards:
                shard["checksum"] = "xxh3_128:" + "f" * 32
        path.write_text(json.dumps(data))
    elif how == "overlap":  # a shard starting inside another's batches
        data = {**good, "writer": 5}
        name, shards = next((n, [s for s in ss if s["n_batches"] > 1]) for n, ss in good["splits"].items())
        shard = dict(shards[0])
        shard["first_batch"] += 1
        shard["first_row"] += 1
        shard["file"] = f"{name}/shard-{shard['first_batch']:05d}.h5"
        data["splits"] = {name: [shard]}
        path.write_text(json.dumps(data))
    elif how == "wrong writer":
        path.write_text(json.dumps({**good, "writer": 6}))


@pytest.mark.parametrize("how", ["link", "fifo", "garbage", "schema", "other configuration", "conflict",
                                 "overlap", "wrong writer"])
def test_a_hostile_part_is_one_sentence_and_changes_nothing(tiny_models, tmp_path, small_builtin, how):
    out = tmp_path / "c"
    with_writers(tiny_models["bert"], out, 2, merge=False)
    _plant(out, how)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}
    with pytest.raises(CacheError) as err:
        lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, **OPTIONS)
    message = str(err.value)
    assert "\n" not in message and ("manifest part" in message or "do not fit together" in message
                                    or "listed twice" in message), message
    assert "--overwrite" in message or "delete it" in message or "re-extract" in message
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}
    assert after == before
    assert (tmp_path / "elsewhere.json").read_text() == "{}" if how == "link" else True
    result = lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, overwrite=True, **OPTIONS)
    assert result.manifest.complete and not part_files(out)


@pytest.mark.parametrize("state", ["missing", "on disk"])
def test_a_part_entry_the_plan_does_not_give_is_named_and_its_batches_extracted_again(tiny_models, tmp_path,
                                                                                     small_builtin, single, state):
    """Tokens moved between two entries of a part (the totals still fit the plan), the first one's shard deleted or
    not: the resume used to fail re-extracting it in place with "gave 8 rows where the manifest lists 8"."""
    out = tmp_path / "c"
    with_writers(tiny_models["bert"], out, 2, merge=False)
    path = out / part_name(0)
    part = json.loads(path.read_text())
    first, second = next(shards for shards in part["splits"].values() if len(shards) > 1)[:2]
    first["n_tokens"] += 3
    second["n_tokens"] -= 3
    path.write_text(json.dumps(part))
    if state == "missing":
        (out / first["file"]).unlink()
    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(" ".join(record.getMessage().split()))
    logging.getLogger("layercache").addHandler(handler)
    try:
        result = lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, **OPTIONS)
    finally:
        logging.getLogger("layercache").removeHandler(handler)
    assert result.manifest.complete
    named = [line for line in said if line.startswith(f"Shard {first['file']} is {state}, and its entry")]
    assert named and f"lists {first['n_examples']} rows and {first['n_tokens']} tokens" in named[0], said
    assert "so its batches are extracted again" in named[0]
    assert any(line.startswith(f"Shard {second['file']} is on disk, and its entry") for line in said), said
    left, right = contents(out), contents(single)  # the cache a single writer writes (its statistics aside)
    assert left.keys() == right.keys()
    for key in left:
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)
    with lc.LayerCache.open(out) as cache:
        assert cache.shard_problems() == {}


# --- format versions -----------------------------------------------------------------------------------
def as_version_1(cache: Path) -> None:
    """Rewrite a cache as format 1 wrote it: shards numbered in order, ``format_version`` 1."""
    data = json.loads((cache / "manifest.json").read_text())
    data["format_version"] = 1
    for name, split in data["splits"].items():
        for i, shard in enumerate(split["shards"]):
            new = f"{name}/shard-{i:05d}.h5"
            if shard["file"] != new:
                os.rename(cache / shard["file"], cache / new)
                shard["file"] = new
    (cache / "manifest.json").write_text(json.dumps(data))


def test_a_version_1_cache_opens_and_a_stopped_one_resumes(tiny_models, tmp_path, small_builtin, single,
                                                          monkeypatch):
    old = tmp_path / "old"
    os.system(f"cp -a {single} {old}")
    as_version_1(old)
    assert any(name.endswith("shard-00001.h5") for name in shard_names(old))
    with lc.LayerCache.open(old) as a, lc.LayerCache.open(single) as b:
        assert a.manifest.format_version == 1
        for split in a.splits:
            np.testing.assert_array_equal(a.tokens(split, range(5))[0], b.tokens(split, range(5))[0])

    stopped = tmp_path / "stopped"
    original, calls = steps.run_batch, []

    def stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(steps, "run_batch", stop)
        with pytest.raises(KeyboardInterrupt):
            lc.extract(str(tiny_models["bert"]), "builtin", stopped, progress=False, **OPTIONS)
    as_version_1(stopped)
    result = lc.extract(str(tiny_models["bert"]), "builtin", stopped, progress=False, **OPTIONS)
    assert result.resumed and result.manifest.format_version == FORMAT_VERSION
    assert_same_cache(stopped, single)


def test_a_newer_format_is_refused_naming_the_versions(tmp_path, single):
    data = json.loads((single / "manifest.json").read_text())
    data["format_version"] = FORMAT_VERSION + 1
    (single / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(CacheError, match=rf"format version {FORMAT_VERSION + 1}.*reads versions 1 and 2"):
        lc.LayerCache.open(single)
