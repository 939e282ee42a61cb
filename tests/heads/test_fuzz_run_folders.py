"""Property-based: a run or sweep folder salted with links, FIFOs, foreign files and odd permissions.

Hypothesis plants a few entries in the folder a run is about to be written to (at layercache's own
names, at foreign names, inside ``best/``): links to a file or a folder outside, dangling links,
loops, FIFOs, foreign files and folders, and takes permissions away. Then it trains a head into the
folder, saves one, or sweeps into it, with or without ``overwrite``. Every outcome must be a correct
result (a run that loads, real files only, the foreign entries as they were) or a
:class:`~layercache.errors.LayercacheError`; nothing outside the folder may change (hashed before and
after), nothing may hang on a FIFO, and no staging folder or lock file of this run may be left.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from conftest import tiny_builtin_cache
from fs_support import make_outside, no_hang, plant, real_parents, restore_access, tree_state
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from layercache.errors import LayercacheError
from layercache.heads import LayerHead, sweep, train_head

QUICK = {"tasks": ["sentiment"], "epochs": 1, "progress": False, "device": "cpu"}
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
NAMES = ("config.json", "weights.safetensors", "metrics.json", "layer_weights.png", "sweep.json", "best",
         "ensemble", ".layercache.lock", "best/config.json", "best/weights.safetensors", "notes.txt", "data",
         ".layercache-partial-0badc0de")
KINDS = ("link-to-file", "link-to-folder", "dangling", "loop", "fifo", "foreign-file", "foreign-folder", "no-access")
OWN = {"config.json", "weights.safetensors", "metrics.json", "layer_weights.json", "layer_weights.png",
       "sweep.json", "best", "ensemble"}


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "fuzz-runs", 40)


@pytest.fixture(scope="module")
def head(cache, tmp_path_factory):
    return LayerHead.load(train_head(cache, "last", out=tmp_path_factory.mktemp("fuzz-head") / "run", **QUICK).run)


def _plant(folder: Path, name: str, kind: str, outside: Path) -> None:
    """Plant ``kind`` at ``name`` unless something is there already or a folder on the way is not a real one."""
    if os.path.lexists(folder / name) or not real_parents(folder, name):
        return
    plant(folder / name, kind, outside, inside="thesis.tex")


@SETTINGS
@example(plants=[("layer_weights.png", "link-to-file")], action="train", overwrite=True, folder_mode=0o755)
@example(plants=[("best", "link-to-folder"), ("notes.txt", "foreign-file")], action="sweep", overwrite=True,
         folder_mode=0o755)
@given(plants=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(KINDS)), min_size=1, max_size=4),
       action=st.sampled_from(("train", "save", "sweep")), overwrite=st.sampled_from((True, True, False)),
       folder_mode=st.sampled_from((0o755, 0o755, 0o555)))
def test_a_salted_run_folder_gives_a_correct_run_or_a_typed_error(cache, head, plants, action, overwrite,
                                                                  folder_mode):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        outside = make_outside(root / "outside")
        run = root / "sandbox" / "run"
        run.mkdir(parents=True)
        for name, kind in plants:
            _plant(run, name, kind, outside)
        foreign = {k: v for k, v in tree_state(run).items() if Path(k).parts[0] not in OWN
                   and not Path(k).name.startswith(".layercache")}
        lock_before = os.path.lexists(run / ".layercache.lock")
        before = tree_state(outside), tree_state(cache)
        run.chmod(folder_mode)
        try:
            if action == "train":
                call = lambda: train_head(cache, "last", out=run, overwrite=overwrite, **QUICK)  # noqa: E731
            elif action == "save":
                call = lambda: head.save(run)  # noqa: E731
            else:
                call = lambda: sweep(cache, out=run, overwrite=overwrite, candidates=["last"], seeds=1,  # noqa: E731
                                     budget=None, progress=False, tasks=["sentiment"])
            try:
                with no_hang(120):
                    call()
                succeeded = True
            except LayercacheError:
                succeeded = False
        finally:
            run.chmod(0o755)
        assert (tree_state(outside), tree_state(cache)) == before, "something outside the run folder changed"
        left = {p.name for p in run.iterdir()}
        assert not any(n.startswith(".layercache-partial-") and n != ".layercache-partial-0badc0de" for n in left)
        if not lock_before:
            assert ".layercache.lock" not in left
        if succeeded:
            written = run / "best" if action == "sweep" else run
            for name in ("config.json", "weights.safetensors", "metrics.json", "layer_weights.json",
                         "layer_weights.png"):
                if action != "save" or name in ("config.json", "weights.safetensors"):
                    assert stat.S_ISREG(os.lstat(written / name).st_mode), name
            assert LayerHead.load(written).mixer == "last"
            now = tree_state(run)
            assert {k: now.get(k) for k in foreign} == foreign, "a foreign entry was changed"
        restore_access(root)
        shutil.rmtree(root / "sandbox", ignore_errors=True)
