"""A cache you can trust: damaged manifests, paths leading out, two writers, --overwrite, --repair.

Each test here failed before the fix it guards (issue 13).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from cli_support import assert_refused, invoke
from shard_support import shard_contents

import layercache as lc
from layercache.store.lock import LOCK_NAME, CacheLock


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text("text\tlabel\n" + "".join(
        f"the lamp {'is good' if i % 2 else 'is not good'} today number {i}\t{'pos' if i % 2 else 'neg'}\n"
        for i in range(40)))
    return path


@pytest.fixture
def cache(tiny_models, tsv, tmp_path):
    """A complete cache with several shards per split."""
    out = tmp_path / "cache"
    result = invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet", "--shard-size", "20KB",
                    "--batch-tokens", "64")
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("train/shard-*.h5"))) >= 3
    return out


def extract_args(tiny_models, tsv, out):
    return ["extract", tiny_models["bert"], tsv, "--out", out, "--quiet", "--shard-size", "20KB",
            "--batch-tokens", "64"]


def edit_manifest(cache: Path, change) -> None:
    path = cache / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# --- the manifest is checked against one typed schema ---------------------------------------------
BAD_MANIFESTS = {
    "storage dtype int3": (lambda m: m["storage"].__setitem__("dtype", "int3"), "storage.dtype"),
    "splits as a list": (lambda m: m.__setitem__("splits", list(m["splits"])), "splits"),
    "storage null": (lambda m: m.__setitem__("storage", None), "storage"),
    "unknown task kind": (lambda m: m["tasks"][0].__setitem__("kind", "ranking"), "tasks[0].kind"),
    "unknown checksum scheme": (lambda m: m["splits"]["train"]["shards"][0].__setitem__("checksum", "md5:00"),
                                "checksum"),
    "negative example count": (lambda m: m["splits"]["train"].__setitem__("n_examples", -5), "n_examples"),
    "more rows written than planned": (lambda m: m["splits"]["train"].__setitem__("n_examples", 3), "plans only"),
    "a shard starting at the wrong row": (lambda m: m["splits"]["train"]["shards"][1].__setitem__("first_row", 0),
                                          "first_row"),
    "complete with a split unfinished": (lambda m: m["splits"]["train"].__setitem__("complete", False), "complete"),
    "layer names and layers disagree": (lambda m: m["storage"]["layer_names"].pop(), "layer_names"),
    "a missing field": (lambda m: m["model"].pop("hidden_size"), "model.hidden_size"),
    "a boolean count": (lambda m: m["splits"]["train"].__setitem__("n_tokens", True), "n_tokens"),
    # Still layercache's by its two marker keys (a manifest without them is not a cache at all: test_confinement.py).
    "every section gone": (lambda m: (m.clear(), m.update(format_version=1, config_hash="0" * 64)), "model"),
}


@pytest.mark.parametrize("case", list(BAD_MANIFESTS))
def test_a_damaged_manifest_is_refused_naming_the_field(cache, case):
    change, field = BAD_MANIFESTS[case]
    edit_manifest(cache, change)
    with pytest.raises(lc.CacheError, match="is damaged") as err:
        lc.read_manifest(cache)
    assert field in str(err.value)
    for command in (["info", cache], ["info", cache, "--check"], ["train-head", cache, "--epochs", "1", "--quiet"]):
        assert_refused(invoke(*command), "is damaged", field)


def test_manifest_that_is_not_json_or_not_an_object(cache):
    (cache / "manifest.json").write_bytes(b"\xff\xfe garbage")
    assert_refused(invoke("info", cache), "cannot be read")
    (cache / "manifest.json").write_text("[1, 2]")
    assert_refused(invoke("info", cache), "should be a JSON object")


# --- nothing outside the cache is read or deleted ---------------------------------------------------
def test_a_split_named_dot_dot_cannot_make_overwrite_delete_outside(tiny_models, tsv, cache, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "shard-00000.h5"
    victim.write_text("not yours")

    def rename(m):
        m["splits"]["../outside"] = m["splits"].pop("train")
    edit_manifest(cache, rename)
    assert_refused(invoke("info", cache), "splits key")
    result = invoke(*extract_args(tiny_models, tsv, cache), "--overwrite")
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "not yours" and outside.is_dir()
    assert lc.LayerCache.open(cache).num_examples("train") == 40  # rebuilt afresh


@pytest.mark.parametrize("how", ["absolute path", "dot-dot path"])
def test_shard_paths_in_the_manifest_must_be_the_cache_own(cache, tmp_path, how):
    real = sorted(cache.glob("train/shard-*.h5"))[0]
    copy = tmp_path / "elsewhere.h5"
    copy.write_bytes(real.read_bytes())
    path = str(copy) if how == "absolute path" else "train/../../elsewhere.h5"
    edit_manifest(cache, lambda m: m["splits"]["train"]["shards"][0].__setitem__("file", path))
    for command in (["info", cache], ["train-head", cache, "--epochs", "1", "--quiet"]):
        assert_refused(invoke(*command), "train/shard-00000.h5")


def test_symlinks_leading_out_of_the_cache_are_refused_before_any_read(cache, tmp_path):
    outside = tmp_path / "outside-train"
    (cache / "train").rename(outside)
    (cache / "train").symlink_to(outside, target_is_directory=True)
    with pytest.raises(lc.CacheError, match="leads outside the cache"):
        lc.LayerCache.open(cache)
    assert_refused(invoke("train-head", cache, "--epochs", "1", "--quiet"), "leads outside the cache")

    (cache / "train").unlink()
    (cache / "train").mkdir()
    for shard in sorted(outside.iterdir()):
        (cache / "train" / shard.name).symlink_to(shard)
    assert_refused(invoke("info", cache), "leads outside the cache")
    with pytest.raises(lc.CacheError, match="leads outside the cache"):
        lc.LayerCache.open(cache)


# --- one writer at a time ---------------------------------------------------------------------------
def test_a_second_writer_is_refused_naming_the_first(tiny_models, tsv, cache):
    before = shard_contents(cache)
    with CacheLock(cache):
        result = invoke(*extract_args(tiny_models, tsv, cache), "--overwrite")
    assert_refused(result, "being written by another layercache process", f"pid {os.getpid()}")
    after = shard_contents(cache)
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)
    assert lc.LayerCache.open(cache).num_examples("train") == 40


LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from layercache.store.lock import CacheLock
    lock = CacheLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def test_a_sigkilled_writer_leaves_no_stale_lock(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    out.mkdir()
    child = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(out)], stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"locked"
    held = invoke(*extract_args(tiny_models, tsv, out))
    assert_refused(held, f"pid {child.pid}")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (out / LOCK_NAME).exists()  # the file stays; the lock died with its process
    result = invoke(*extract_args(tiny_models, tsv, out))
    assert result.exit_code == 0, result.output


def test_a_refused_run_into_a_new_folder_leaves_no_folder(tiny_models, tmp_path):
    out = tmp_path / "never"
    assert_refused(invoke("extract", tiny_models["bert"], tmp_path / "missing.tsv", "--out", out), "missing.tsv")
    assert not out.exists()


# --- --overwrite starts afresh; --repair and resume re-extract damaged shards -----------------------
def test_overwrite_starts_afresh_even_with_the_same_configuration(tiny_models, tsv, cache):
    shard = sorted(cache.glob("train/shard-*.h5"))[1]
    flip_bytes(shard)
    created = lc.read_manifest(cache).created_at
    time.sleep(1.1)  # created_at has one-second resolution
    result = invoke(*extract_args(tiny_models, tsv, cache), "--overwrite")
    assert result.exit_code == 0 and "written" in result.output, result.output
    assert lc.read_manifest(cache).created_at != created
    assert invoke("info", cache, "--check").exit_code == 0


def test_repair_reextracts_only_the_damaged_shards(tiny_models, tsv, cache, tmp_path):
    clean = shard_contents(cache)
    shards = sorted(cache.glob("train/shard-*.h5"))
    flip_bytes(shards[1])
    untouched = {s: s.stat().st_mtime_ns for s in shards if s != shards[1]}
    assert invoke("info", cache, "--check").exit_code == 1
    result = invoke(*extract_args(tiny_models, tsv, cache), "--repair")
    assert result.exit_code == 0 and "repaired (1 shard" in result.output, result.output
    assert {s: s.stat().st_mtime_ns for s in untouched} == untouched  # the good shards were not rewritten
    assert invoke("info", cache, "--check").exit_code == 0
    repaired = shard_contents(cache)
    assert repaired.keys() == clean.keys()
    for key in clean:
        np.testing.assert_array_equal(repaired[key], clean[key], err_msg=key)
    again = invoke(*extract_args(tiny_models, tsv, cache), "--repair")
    assert again.exit_code == 0 and "nothing to repair" in again.output


def test_a_resume_reverifies_the_shards_it_keeps(tiny_models, tsv, cache):
    clean = shard_contents(cache)
    shards = sorted(cache.glob("train/shard-*.h5"))

    def unfinish(m):  # as if killed after the first two shards of train
        train = m["splits"]["train"]
        for shard in train["shards"][2:]:
            (cache / shard["file"]).unlink()
        train["shards"] = train["shards"][:2]
        train["complete"] = m["complete"] = False
        for split in m["splits"].values():
            split["complete"] = False
            if split is not train:
                for shard in split["shards"]:
                    (cache / shard["file"]).unlink()
                split["shards"] = []
    edit_manifest(cache, unfinish)
    flip_bytes(shards[0])
    result = invoke(*extract_args(tiny_models, tsv, cache))
    assert result.exit_code == 0 and "repaired (1 shard" in result.output, result.output
    resumed = shard_contents(cache)
    for key in clean:
        np.testing.assert_array_equal(resumed[key], clean[key], err_msg=key)


def test_overwrite_and_repair_together_are_refused(tiny_models, tsv, cache):
    assert_refused(invoke(*extract_args(tiny_models, tsv, cache), "--overwrite", "--repair"), "only one")


def test_repair_without_a_cache_is_refused(tiny_models, tsv, tmp_path):
    assert_refused(invoke(*extract_args(tiny_models, tsv, tmp_path / "new"), "--repair"), "no cache")


# --- permissions ------------------------------------------------------------------------------------
def test_the_manifest_has_the_permissions_of_the_shards(cache):
    shard = sorted(cache.glob("train/shard-*.h5"))[0]
    assert (cache / "manifest.json").stat().st_mode & 0o777 == shard.stat().st_mode & 0o777
    assert (cache / "manifest.json").stat().st_mode & 0o044  # group and others can read it (umask 022)
