"""Issue 26, runs side: no write inside a run or sweep folder goes through a link or into a FIFO.

One test per write path of a run folder (``config.json``, the weights, ``metrics.json``,
``layer_weights.json`` / ``.png``), of a sweep folder (``sweep.json``, ``best/`` and the files in it,
``ensemble/``), of the lock, and of the default runs folder beside the cache, each with a link planted
there (to a file or a folder outside, dangling, a loop) or a FIFO. The run either succeeds, replacing
the planted entry with a real file of its own, or is refused with a typed error; in every case
nothing outside the run folder changes (hashed before and after) and no FIFO is ever opened (a
blocked open would hang: each call runs under a deadline).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import tiny_builtin_cache
from fs_support import OUTSIDE_FOLDER, make_outside, no_hang, plant, tree_state

from layercache.errors import LayercacheError, UnsafePathError
from layercache.heads import LayerHead, sweep, train_head

QUICK = {"tasks": ["sentiment"], "epochs": 1, "progress": False, "device": "cpu"}
RUN_FILES = ("config.json", "weights.safetensors", "metrics.json", "layer_weights.json", "layer_weights.png")
PLANTS = ("link-out", "dangling", "loop", "fifo")


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "run-links", 60)


@pytest.fixture
def sandbox(tmp_path, cache):
    """``outside``: a file and a folder a planted link may point at, hashed with the cache before and after."""
    outside = make_outside(tmp_path / "outside", {f"{OUTSIDE_FOLDER}/config.json": "{}\n"})
    before = tree_state(outside), tree_state(cache)
    yield outside
    assert (tree_state(outside), tree_state(cache)) == before, "something outside the run folder changed"


def plant_at(path: Path, how: str, outside: Path, folder: bool = False) -> None:
    """Put a link or a FIFO where layercache will write ``path`` (``link-out``: to a folder or a file outside)."""
    if how == "link-out":
        how = "link-to-folder" if folder else "link-to-file"
    plant(path, how, outside)


def assert_real(path: Path, folder: bool = False) -> None:
    st = os.lstat(path)
    wanted = "folder" if folder else "file"
    assert (stat.S_ISDIR if folder else stat.S_ISREG)(st.st_mode), f"{path} is not a real {wanted}"


# --- a run folder -------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", PLANTS)
@pytest.mark.parametrize("name", RUN_FILES)
def test_a_run_file_planted_as_link_or_fifo_is_replaced_never_written_through(cache, sandbox, tmp_path, name, how):
    run = tmp_path / "run"
    plant_at(run / name, how, sandbox)
    with no_hang(120):
        result = train_head(cache, "last", out=run, overwrite=True, **QUICK)
    assert result.run == run.resolve()
    for file in RUN_FILES:
        assert_real(run / file)
    assert LayerHead.load(run).mixer == "last"


@pytest.mark.parametrize("how", PLANTS)
def test_a_planted_lock_file_is_refused_never_written_through(cache, sandbox, tmp_path, how):
    run = tmp_path / "run"
    plant_at(run / ".layercache.lock", how, sandbox)
    with no_hang(120), pytest.raises(LayercacheError) as refused:
        train_head(cache, "last", out=run, overwrite=True, **QUICK)
    assert ".layercache.lock" in str(refused.value)
    assert {p.name for p in run.iterdir()} == {".layercache.lock"}  # nothing was written beside it


@pytest.mark.parametrize("how", PLANTS)
def test_a_saved_head_never_writes_through_a_planted_file(cache, sandbox, tmp_path, how):
    head = LayerHead.load(train_head(cache, "last", out=tmp_path / "first", **QUICK).run)
    target = tmp_path / "saved"
    plant_at(target / "weights.safetensors", how, sandbox)
    with no_hang(120):
        head.save(target)
    assert_real(target / "weights.safetensors")


# --- the default runs folder beside the cache ---------------------------------------------------------------
@pytest.mark.parametrize("how", PLANTS)
def test_a_link_in_place_of_the_runs_folder_is_refused(cache, sandbox, tmp_path, how):
    copy = shutil.copytree(cache, tmp_path / "copy" / "cache")
    plant_at(copy.parent / "cache.runs", how, sandbox, folder=True)
    with no_hang(120), pytest.raises(UnsafePathError, match="cache.runs"):
        train_head(copy, "last", **QUICK)


@pytest.mark.parametrize("how", PLANTS)
def test_a_planted_default_run_name_is_skipped(cache, sandbox, tmp_path, how):
    cache = shutil.copytree(cache, tmp_path / "copy" / "cache")
    plant_at(cache.parent / "cache.runs" / "last-001", how, sandbox, folder=True)
    with no_hang(120):
        run = train_head(cache, "last", **QUICK).run
    assert run.name == "last-002"
    assert_real(run, folder=True)


# --- a sweep folder -----------------------------------------------------------------------------------------
SWEEP_PATHS = ("sweep.json", "best", "ensemble", "best/config.json", "best/weights.safetensors",
               "ensemble/layer_weights.png", ".layercache.lock")


@pytest.mark.parametrize("how", PLANTS)
@pytest.mark.parametrize("where", SWEEP_PATHS)
def test_a_sweep_path_planted_as_link_or_fifo_is_replaced_or_refused(cache, sandbox, tmp_path, where, how):
    out = tmp_path / "sweep"
    folder = where in ("best", "ensemble")
    if "/" in where:  # a file inside a run folder the sweep writes: that folder is a real one
        (out / where).parent.mkdir(parents=True)
    plant_at(out / where, how, sandbox, folder=folder)

    def run():
        return sweep(cache, out=out, overwrite=True, candidates=["last", "layer:1"], seeds=1, budget=None,
                     ensemble=2, progress=False, tasks=["sentiment"])

    if where == ".layercache.lock":
        with no_hang(120), pytest.raises(UnsafePathError, match="lock"):
            run()
        return
    with no_hang(120):
        run()
    assert_real(out / "sweep.json")
    for sub in ("best", "ensemble"):
        assert_real(out / sub, folder=True)
        for file in RUN_FILES:
            assert_real(out / sub / file)
        LayerHead.load(out / sub)
