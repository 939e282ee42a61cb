"""Reads that end in one sentence, never a hang or a traceback (issue 26; each test failed on 35f1445).

A shard that is a FIFO (opening it blocks until someone writes), a shard the user may not read, a
label outside its task's classes and ``label_names`` shorter than the labels: ``train-head``,
``eval``, ``info --check`` and the library refuse each, naming the split, shard or task and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import pytest
from cli_support import assert_refused, invoke
from conftest import tiny_builtin_cache
from fs_support import no_hang

import layercache as lc


@pytest.fixture(scope="module")
def pristine(tiny_models, tmp_path_factory):
    """The built-in task set (sequence, token and regression tasks), and a run trained on it."""
    cache = tiny_builtin_cache(tiny_models, tmp_path_factory, "reads", 60)
    run = tmp_path_factory.mktemp("reads-run") / "run"
    lc.train_head(cache, "scalar", out=run, tasks=["sentiment", "negation_scope"], epochs=1, progress=False)
    return cache, run


@pytest.fixture
def cache(pristine, tmp_path) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(pristine[0], copy)
    return copy


def first_shard(cache: Path, split: str = "train") -> Path:
    return sorted(cache.glob(f"{split}/shard-*.h5"))[0]


def users_of_a_cache(cache: Path, run: Path):
    """The commands that read shards for training and scoring."""
    return [["train-head", cache, "--mixer", "scalar", "--epochs", "1", "--quiet", "--task", "sentiment",
             "--task", "negation_scope", "--out", cache.parent / "new-run"],
            ["eval", run, cache, "--split", "train"]]


# --- a FIFO where a shard should be -------------------------------------------------------------------
def test_a_shard_that_is_a_fifo_is_refused_not_opened(pristine, cache):
    shard = first_shard(cache)
    shard.unlink()
    os.mkfifo(shard)
    with no_hang():
        for command in users_of_a_cache(cache, pristine[1]):
            assert_refused(invoke(*command), f"Shard {shard}", "is a FIFO (named pipe), not a regular file")
        with lc.LayerCache.open(cache) as opened, pytest.raises(lc.CacheError, match="FIFO"):
            opened.labels("train", "sentiment")
        checked = invoke("info", cache, "--check")
    assert checked.exit_code == 1 and "is a FIFO (named pipe), not a regular file" in checked.output, checked.output


# --- a shard the user may not read --------------------------------------------------------------------
NOBODY = 65534


def _run_as_nobody(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAYERCACHE_HOME": tempfile.gettempdir(), "COLUMNS": "200"}
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                           "-m", "layercache.cli", *args], capture_output=True, text=True, env=env, timeout=300)


def test_info_check_names_a_shard_that_cannot_be_read(cache):
    """``chmod 000`` on a shard; as root (who reads anything) the check runs as ``nobody`` through ``setpriv``."""
    shared = Path(tempfile.mkdtemp(prefix="layercache-perm-"))
    try:
        shared.chmod(0o755)
        copy = shared / "cache"
        shutil.copytree(cache, copy)
        for path in [copy, *copy.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        shard = first_shard(copy)
        shard.chmod(0)
        if os.geteuid() != 0:
            result = invoke("info", copy, "--check")
            output, code = result.output, result.exit_code
        elif shutil.which("setpriv"):
            done = _run_as_nobody(["info", str(copy), "--check"])
            output, code = done.stdout + done.stderr, done.returncode
        else:
            pytest.skip("running as root without setpriv: no way to make a file unreadable")
        assert code == 1, output
        assert "Traceback" not in output, output
        assert f"{shard.parent.name}/{shard.name} (cannot be read (Permission denied))" in " ".join(output.split())
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# --- labels outside their task ------------------------------------------------------------------------
def test_a_shard_label_out_of_range_is_refused_naming_split_shard_and_task(pristine, cache):
    shard = first_shard(cache)
    with h5py.File(shard, "r+") as h:
        labels = h["labels/sentiment"]
        labels[3] = 7  # sentiment has 2 classes
    for command in users_of_a_cache(cache, pristine[1]):
        assert_refused(invoke(*command), f"Shard train/{shard.name} (split 'train') holds the label 7 for task "
                                         "'sentiment'", "--repair")
    with lc.LayerCache.open(cache) as opened, pytest.raises(lc.CacheError, match="holds the label 7"):
        opened.labels("train", "sentiment")


def test_a_token_label_out_of_range_is_refused(pristine, cache):
    shard = first_shard(cache, "validation")
    with h5py.File(shard, "r+") as h:
        h["labels/negation_scope"][0] = -3  # negative and not the ignore index
    assert_refused(invoke(*users_of_a_cache(cache, pristine[1])[0]), "holds the label -3 for task 'negation_scope'")


def test_label_names_shorter_than_the_labels_are_refused(pristine, cache):
    path = cache / "manifest.json"
    manifest = json.loads(path.read_text())
    task = next(t for t in manifest["tasks"] if t["name"] == "sentiment")
    task["label_names"] = task["label_names"][:1]
    path.write_text(json.dumps(manifest))
    train, evaluate = users_of_a_cache(cache, pristine[1])
    assert_refused(invoke(*train), "for task 'sentiment', whose manifest names 1 classes", "label_names were edited",
                   "--overwrite")
    assert_refused(invoke(*evaluate), "'sentiment'")  # eval compares the run's classes with the cache's first


def test_a_non_finite_regression_target_in_a_shard_is_refused(pristine, cache):
    shard = first_shard(cache)
    with h5py.File(shard, "r+") as h:
        h["labels/intensity"][0] = float("nan")
    with lc.LayerCache.open(cache) as opened, pytest.raises(lc.CacheError, match="'intensity', which is not"):
        opened.labels("train", "intensity")
