"""Property-based: a hostile file system inside a cache never makes layercache touch anything outside it.

Hypothesis plants a few random things inside a copy of a small cache (issue 26): links to a file or a
folder outside, dangling links, links to another split, links to themselves, FIFOs, foreign files
and folders, permission changes, on the cache's own entries (lock, manifest, side files, split
folders, shards) and on names it would write (temp shards, stray shards, atomic-write temps). Then
it runs what a user runs: ``extract`` resuming, with ``--overwrite`` or ``--repair``, ``info
--check``, and reads. Whatever happens:

- nothing outside the cache changes: the sandbox around it is fingerprinted (every entry, link
  target, file's bytes and mode) before and after;
- the outcome is a correct result or a :class:`~layercache.errors.LayercacheError` (one sentence
  in the CLI); a hang fails too (a FIFO opened), through an alarm;
- an extraction that succeeds leaves a cache that opens, whose every shard matches its checksum
  and whose split folders and shards are real (no link on the way).

The tests run as root here, where permission bits do not stop a read; the planted ``chmod`` then
only checks that nothing follows from it, and ``tests/store/test_trust_reads.py`` checks an
unreadable shard as an unprivileged user.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from fs_support import (
    OUTSIDE_FOLDER,
    make_outside,
    no_hang,
    plant,
    real_parents,
    remove,
    restore_access,
    tree_state,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import layercache as lc
from layercache.errors import LayercacheError

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
OPTIONS = dict(shard_bytes=6_000, batch_tokens=48, progress=False)


@pytest.fixture(scope="module")
def setup(tiny_models, tmp_path_factory):
    """Two small data files, a complete cache of them with several shards per split, and its file names."""
    root = tmp_path_factory.mktemp("fuzz-fs")
    files = {}
    for split, n in (("train", 12), ("validation", 6)):
        files[split] = root / f"{split}.tsv"
        files[split].write_text("text\tlabel\n" + "".join(
            f"the lamp {'is good' if i % 2 else 'is not good'} today {i}\t{'pos' if i % 2 else 'neg'}\n"
            for i in range(n)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        cache = lc.extract(str(tiny_models["bert"]), None, root / "cache", split_files={k: str(v) for k, v in
                                                                                       files.items()}, **OPTIONS).path
    shards = sorted(str(p.relative_to(cache)) for p in cache.glob("*/shard-*.h5"))
    assert len([s for s in shards if s.startswith("train/")]) >= 2
    return files, cache, shards


# --- what is planted ----------------------------------------------------------------------------------
KINDS = ("link-to-file", "link-to-folder", "dangling", "link-other-split", "loop", "fifo", "foreign-file",
         "foreign-folder", "chmod-000", "chmod-555")


def targets(shards: list[str]) -> list[str]:
    """The cache's own entries and names it would write."""
    return [".layercache.lock", "manifest.json", "vocab.json", "train", "validation", *shards,
            "train/shard-00009.h5", f"{shards[1]}.tmp", "validation/shard-00001.h5.tmp", "train/notes.txt",
            ".manifest.json-a1b2c3d4.tmp", ".vocab.json-x9y8z7w6.tmp", "extra", "extra/shard-00000.h5"]


def plant_in_cache(cache: Path, outside: Path, relative: str, kind: str) -> None:
    """Replace what is at ``relative`` by ``kind``, or change its mode (planting never writes through a link)."""
    if not real_parents(cache, relative):
        return
    path = cache / relative
    if kind.startswith("chmod"):
        if os.path.lexists(path) and not path.is_symlink():
            path.chmod(0 if kind == "chmod-000" else 0o555)
        return
    remove(path)
    if kind == "link-other-split":
        parts = Path(relative).parts
        other = "validation" if parts[0] == "train" else "train"
        path.symlink_to(Path(*[".."] * (len(parts) - 1), other, *parts[1:]))
    else:  # a foreign folder holds a file named like a shard
        plant(path, kind, outside, inside="shard-00000.h5")


def make_sandbox(root: Path, pristine: Path) -> tuple[Path, Path]:
    if root.exists():
        restore_access(root)  # chmod-ed folders first become removable again
        shutil.rmtree(root)
    cache = root / "cache"
    shutil.copytree(pristine, cache, symlinks=True)
    outside = make_outside(root / "outside", {
        f"{OUTSIDE_FOLDER}/{name}": b"outside: " + name.encode()
        for name in ("shard-00000.h5", "shard-00001.h5", "shard-00001.h5.tmp", "shard-00009.h5", "vocab.json",
                     "manifest.json")})
    return cache, outside


def forget_validation(cache: Path) -> None:
    """The manifest of a run killed before its last split: the resume writes shards."""
    path = cache / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["splits"]["validation"].update(shards=[], complete=False, stats={})
    manifest["complete"] = False
    path.write_text(json.dumps(manifest))
    shutil.rmtree(cache / "validation")


# --- what is run ----------------------------------------------------------------------------------------
def act(action: str, cache: Path, model: str, files: dict) -> object:
    if action == "check":
        with lc.LayerCache.open(cache, allow_incomplete=True) as opened:
            return opened.shard_problems()
    if action == "read":
        with lc.LayerCache.open(cache, allow_incomplete=True) as opened:
            for split in opened.splits:
                n = opened.num_examples(split)
                if n:
                    opened.tokens(split, [0, n - 1])
                    opened.pooled(split, "mean", rows=[0])
                    opened.labels(split, "label")
                    opened.layer_stats(split)
        return None
    return lc.extract(model, None, cache, split_files={k: str(v) for k, v in files.items()},
                      overwrite=action == "overwrite", repair=action == "repair", **OPTIONS)


def assert_healthy(cache: Path) -> None:
    """A cache an extraction just finished: real folders and files, every shard as committed."""
    with lc.LayerCache.open(cache) as opened:
        assert opened.shard_problems() == {}
        assert (opened.num_examples("train"), opened.num_examples("validation")) == (12, 6)
        for name, split in opened.manifest.splits.items():
            assert stat.S_ISDIR(os.lstat(cache / name).st_mode), name
            for shard in split.shards:
                assert stat.S_ISREG(os.lstat(cache / shard.file).st_mode), shard.file


def test_planted_links_fifos_and_foreign_files_never_reach_outside(setup, tiny_models, tmp_path, one_backbone):
    files, pristine, shards = setup
    model = str(tiny_models["bert"])

    @SETTINGS
    @given(plants=st.lists(st.tuples(st.sampled_from(targets(shards)), st.sampled_from(KINDS)), min_size=1,
                           max_size=3),
           incomplete=st.booleans(),
           action=st.sampled_from(["resume", "overwrite", "repair", "check", "read"]))
    def check(plants, incomplete, action):
        sandbox = tmp_path / "sandbox"
        cache, outside = make_sandbox(sandbox, pristine)
        if incomplete:
            forget_validation(cache)
        for relative, kind in plants:
            plant_in_cache(cache, outside, relative, kind)
        before = tree_state(sandbox, skip=cache)
        try:
            with no_hang(60):
                result = act(action, cache, model, files)
        except LayercacheError:
            result = None
        assert tree_state(sandbox, skip=cache) == before
        if action in ("overwrite", "repair") or (action == "resume" and result is not None
                                                  and not result.already_complete):
            if result is not None:
                assert_healthy(cache)

    check()


# --- side files: damaged, named by --check, written again by extract ------------------------------------------
SIDE_FILES = ("vocab.json", "lens.safetensors", "projection.safetensors")
SIDE_DAMAGE = ("deleted", "truncated", "flipped", "zeroed", "empty", "link-to-copy", "link-to-file", "dangling",
               "fifo", "foreign-folder")
PROBLEMS = {"deleted": "missing", "fifo": "is a FIFO (named pipe), not a regular file",
            "foreign-folder": "is a folder, not a regular file",
            **{kind: "is a symbolic link, not a regular file" for kind in ("link-to-copy", "link-to-file", "dangling")}}


@pytest.fixture(scope="module")
def projected(setup, tiny_models, tmp_path_factory):
    """A complete projected decoder cache of the same files: a vocabulary, a lens and a projection."""
    files, _, _ = setup
    root = tmp_path_factory.mktemp("fuzz-side")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        cache = lc.extract(str(tiny_models["gpt2"]), None, root / "cache", project=4,
                           split_files={k: str(v) for k, v in files.items()}, **OPTIONS).path
    assert set(lc.read_manifest(cache).side_files) == {"vocabulary", "lens", "projection"}
    return cache, {name: (cache / name).read_bytes() for name in SIDE_FILES}


def damage_side_file(path: Path, how: str, outside: Path) -> None:
    """Damage a side file as ``how`` says (a link to a copy of its own bytes still counts: it is not the file)."""
    data = path.read_bytes()
    if how in ("truncated", "flipped", "zeroed", "empty"):
        middle = len(data) // 2
        changed = {"truncated": data[:middle], "empty": b"", "zeroed": data[:middle] + bytes(len(data) - middle),
                   "flipped": data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]}[how]
        path.write_bytes(changed)
        return
    path.unlink()
    if how == "link-to-copy":
        (outside / path.name).write_bytes(data)
        path.symlink_to(outside / path.name)
    elif how != "deleted":
        plant(path, how, outside)


def test_damaged_side_files_are_named_by_check_and_written_again_by_extract(projected, setup, tiny_models,
                                                                             tmp_path, one_backbone):
    """``info --check`` names every damaged side file (exit 1); ``extract`` (resuming or --repair) writes each again
    with the bytes extraction wrote, or refuses in one sentence (a folder in its place, kept with what it holds);
    nothing outside the cache changes, and no FIFO is opened."""
    from cli_support import invoke

    pristine, original = projected
    files = {k: str(v) for k, v in setup[0].items()}

    @SETTINGS
    @given(damages=st.lists(st.tuples(st.sampled_from(SIDE_FILES), st.sampled_from(SIDE_DAMAGE)), min_size=1,
                            max_size=3, unique_by=lambda d: d[0]),
           repair=st.booleans())
    def check(damages, repair):
        sandbox = tmp_path / "sandbox"
        cache, outside = make_sandbox(sandbox, pristine)
        for name, how in damages:
            damage_side_file(cache / name, how, outside)
        before = tree_state(sandbox, skip=cache)
        with no_hang(60):
            checked = invoke("info", cache, "--check")
        text = " ".join(checked.output.split())
        assert checked.exit_code == 1, text
        for name, how in damages:
            assert f"{name} ({PROBLEMS.get(how, 'changed since extraction')})" in text, text
        folders = [name for name, how in damages if how == "foreign-folder"]
        try:
            with no_hang(120):
                result = lc.extract(str(tiny_models["gpt2"]), None, cache, project=4, split_files=files,
                                    repair=repair, **OPTIONS)
        except LayercacheError as err:
            assert folders and f"{cache / folders[0]} is a folder" in str(err) and "\n" not in str(err), err
            for name in folders:
                assert (cache / name / "notes.txt").exists()  # someone's folder: kept, with what it holds
        else:
            assert not folders, result
            assert sorted(result.rewritten) == sorted(name for name, _ in damages)
            assert {name: (cache / name).read_bytes() for name in SIDE_FILES} == original
            with lc.LayerCache.open(cache) as opened:
                assert opened.side_file_problems() == {} and opened.shard_problems() == {}
        assert tree_state(sandbox, skip=cache) == before

    check()
