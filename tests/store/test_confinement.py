"""Nothing written, renamed or deleted outside a cache, ever: one test per write path (issue 26).

Every write of extraction goes through :class:`~layercache.core.confine.OwnedFolder`: the lock
file, the manifest, the split folders, the shards and their temp files, the side files. Each test
plants what a hostile or careless user could (a link to a file or folder outside, a dangling link,
a link to another split, a loop, a FIFO, a foreign ``manifest.json``) inside a sandbox, runs the
command, and checks that the part of the sandbox outside the cache did not change at all and that
the outcome is a correct cache or one sentence (exit code 2). Unless marked as a guard, each test
failed on 35f1445.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_support import assert_refused, invoke
from fs_support import make_outside, no_hang, plant, tree_state

import layercache as lc
from layercache.errors import LayercacheError, UnsafePathError
from layercache.store.lock import LOCK_NAME, CacheLock


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("confine-data")
    files = {}
    for split, n in (("train", 30), ("validation", 12)):
        path = root / f"{split}.tsv"
        path.write_text("text\tlabel\n" + "".join(
            f"the lamp {'is good' if i % 2 else 'is not good'} today number {i}\t{'pos' if i % 2 else 'neg'}\n"
            for i in range(n)))
        files[split] = path
    return files


def extract_args(tiny_models, data, out, *more):
    return ["extract", tiny_models["bert"], "--split", f"train={data['train']}", "--split",
            f"validation={data['validation']}", "--out", out, "--quiet", "--shard-size", "20KB",
            "--batch-tokens", "64", *more]


@pytest.fixture(scope="module")
def pristine(tiny_models, data, tmp_path_factory) -> Path:
    """A complete two-split cache, several shards per split."""
    out = tmp_path_factory.mktemp("confine-pristine") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(out.parent / "home"))
        result = invoke(*extract_args(tiny_models, data, out))
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("train/shard-*.h5"))) >= 2 and list(out.glob("validation/shard-*.h5"))
    return out


class Sandbox:
    """``root/cache`` (a copy of the pristine cache) and ``root/outside`` (what must never change)."""

    def __init__(self, root: Path, pristine: Path):
        self.root, self.cache, self.outside = root, root / "cache", root / "outside"
        shutil.copytree(pristine, self.cache, symlinks=True)
        make_outside(self.outside, {"shard-00000.h5": "an outside shard-named file", "shard-00007.h5": "another one"})
        self.before = self.state()

    def state(self) -> dict:
        return tree_state(self.root, skip=self.cache)

    def assert_outside_untouched(self) -> None:
        assert self.state() == self.before

    def edit_manifest(self, change) -> None:
        path = self.cache / "manifest.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    def forget_split(self, split: str) -> None:
        """The manifest of a run killed before ``split`` was written: a schema-valid, incomplete cache."""
        def change(m):
            m["splits"][split].update(shards=[], complete=False, stats={})
            m["complete"] = False
        self.edit_manifest(change)
        shutil.rmtree(self.cache / split)


@pytest.fixture
def sandbox(tmp_path, pristine) -> Sandbox:
    return Sandbox(tmp_path / "sandbox", pristine)


def assert_complete(cache: Path) -> None:
    assert invoke("info", cache, "--check").exit_code == 0
    with lc.LayerCache.open(cache) as opened:
        assert opened.num_examples("train") == 30 and opened.num_examples("validation") == 12


# --- the lock file ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["link-to-file", "dangling"])
def test_a_lock_file_that_is_a_link_is_refused_never_written_through(tiny_models, data, sandbox, kind):
    lock = sandbox.cache / LOCK_NAME
    lock.unlink()
    plant(lock, kind, sandbox.outside)
    result = invoke(*extract_args(tiny_models, data, sandbox.cache))
    assert_refused(result, LOCK_NAME, "is a symbolic link")
    sandbox.assert_outside_untouched()  # the dangling link created no file outside either
    with pytest.raises(UnsafePathError, match="symbolic link"):
        CacheLock(sandbox.cache).acquire()


def test_a_lock_file_that_is_a_fifo_is_refused(tiny_models, data, sandbox):
    lock = sandbox.cache / LOCK_NAME
    lock.unlink()
    os.mkfifo(lock)
    with no_hang():
        result = invoke(*extract_args(tiny_models, data, sandbox.cache))
    assert_refused(result, LOCK_NAME, "FIFO")
    sandbox.assert_outside_untouched()


# --- the manifest: a foreign one is never a cache, and never cleared ----------------------------------
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_with_a_foreign_manifest_is_refused_and_never_cleared(tiny_models, data, tmp_path, overwrite):
    app = tmp_path / "webapp"
    (app / "static").mkdir(parents=True)
    (app / "manifest.json").write_text(json.dumps({"name": "my web app", "start_url": "/"}))
    (app / "index.html").write_text("<html></html>")
    (app / "static" / "app.js").write_text("console.log(1)")
    (app / "static" / "shard-00000.h5").write_text("a file that merely looks like a shard")
    before = tree_state(tmp_path)
    result = invoke(*extract_args(tiny_models, data, app), *(["--overwrite"] if overwrite else []))
    assert_refused(result, "is not a layercache cache", "has no integer format_version", "new or empty --out")
    assert tree_state(tmp_path) == before
    assert_refused(invoke("info", app), "is not a layercache cache")


def test_overwrite_of_a_damaged_cache_deletes_only_layercache_files(tiny_models, data, sandbox):
    cache = sandbox.cache
    sandbox.edit_manifest(lambda m: m["storage"].__setitem__("dtype", "int4"))  # damaged, still layercache's
    keep = {"notes.txt": "mine", "train/notes.txt": "mine too", "train/shard-00001.h5.bak": "a backup",
            "extra/shard-00000.h5": "not a split of this cache", "validation/sub/x.txt": "deep"}
    for name, text in keep.items():
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).write_text(text)
    result = invoke(*extract_args(tiny_models, data, cache), "--overwrite")
    assert result.exit_code == 0, result.output
    for name, text in keep.items():
        assert (cache / name).read_text() == text, name
    assert_complete(cache)
    sandbox.assert_outside_untouched()


# --- split folders ----------------------------------------------------------------------------------
def test_a_resume_through_a_split_folder_linked_outside_is_refused(tiny_models, data, sandbox):
    sandbox.forget_split("validation")
    (sandbox.cache / "validation").symlink_to(sandbox.outside, target_is_directory=True)
    result = invoke(*extract_args(tiny_models, data, sandbox.cache))
    assert_refused(result, "validation is a symbolic link", "never writes through a link")
    sandbox.assert_outside_untouched()


def test_overwrite_removes_a_split_folder_link_without_following_it(tiny_models, data, sandbox):
    sandbox.forget_split("validation")
    (sandbox.cache / "validation").symlink_to(sandbox.outside, target_is_directory=True)
    result = invoke(*extract_args(tiny_models, data, sandbox.cache), "--overwrite")
    assert result.exit_code == 0, result.output
    sandbox.assert_outside_untouched()
    assert not (sandbox.cache / "validation").is_symlink() and (sandbox.cache / "validation").is_dir()
    assert_complete(sandbox.cache)


def test_a_split_folder_linked_to_another_split_is_refused(tiny_models, data, sandbox):
    sandbox.forget_split("validation")
    (sandbox.cache / "validation").symlink_to("train", target_is_directory=True)
    train = tree_state(sandbox.cache / "train")
    result = invoke(*extract_args(tiny_models, data, sandbox.cache))
    assert_refused(result, "validation is a symbolic link")
    assert tree_state(sandbox.cache / "train") == train
    sandbox.assert_outside_untouched()


def test_a_split_folder_that_links_to_itself_is_one_sentence_everywhere(tiny_models, data, sandbox):
    shutil.rmtree(sandbox.cache / "validation")
    (sandbox.cache / "validation").symlink_to("validation")
    assert_refused(invoke(*extract_args(tiny_models, data, sandbox.cache), "--repair"),
                   "validation is a symbolic link")
    for command in (["info", sandbox.cache], ["info", sandbox.cache, "--check"],
                    ["train-head", sandbox.cache, "--epochs", "1", "--quiet"]):
        assert_refused(invoke(*command), "loop of symbolic links")
    with pytest.raises(lc.CacheError, match="loop of symbolic links"):
        lc.LayerCache.open(sandbox.cache)
    sandbox.assert_outside_untouched()


# --- split names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["manifest.json", "vocab.json", "lens.safetensors", "Manifest.JSON", "x" * 256])
def test_split_names_that_cannot_be_split_folders_are_refused_up_front(tiny_models, tmp_path, name):
    out = tmp_path / "cache"
    # The file does not even exist: the name is refused before the data is read or a folder made.
    result = invoke("extract", tiny_models["bert"], "--split", f"{name}={tmp_path / 'missing.tsv'}", "--out", out)
    assert_refused(result, "cannot be a folder of the cache", "choose another split name")
    assert not out.exists()
    with pytest.raises(lc.ConfigError, match="cannot be a folder of the cache"):
        lc.extract(str(tiny_models["bert"]), None, out, split_files={name: str(tmp_path / "missing.tsv")},
                   progress=False)


def test_a_manifest_naming_a_split_after_a_cache_file_is_damaged(sandbox):
    sandbox.edit_manifest(lambda m: m["splits"].__setitem__("vocab.json", m["splits"].pop("validation")))
    assert_refused(invoke("info", sandbox.cache), "is damaged", "the name of the cache's own file vocab.json")


# --- shards -----------------------------------------------------------------------------------------
def test_repair_never_writes_through_a_planted_temp_shard(tiny_models, data, sandbox):
    shard = sorted(sandbox.cache.glob("train/shard-*.h5"))[1]
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    shard.write_bytes(bytes(damaged))
    plant(shard.parent / (shard.name + ".tmp"), "link-to-file", sandbox.outside)
    result = invoke(*extract_args(tiny_models, data, sandbox.cache), "--repair")
    assert result.exit_code == 0 and "repaired" in result.output, result.output
    sandbox.assert_outside_untouched()
    assert not shard.is_symlink()
    assert_complete(sandbox.cache)


def test_stray_shard_links_are_unlinked_never_followed(tiny_models, data, sandbox):
    """Guard (35f1445 unlinked them too): a resume removes unlisted shard names, links as links."""
    sandbox.forget_split("validation")
    (sandbox.cache / "validation").mkdir()
    (sandbox.cache / "validation" / "shard-00000.h5").symlink_to(sandbox.outside / "shard-00000.h5")
    (sandbox.cache / "validation" / "shard-00003.h5.tmp").symlink_to(sandbox.outside / "shard-00007.h5")
    (sandbox.cache / "validation" / "notes.txt").write_text("not layercache's")
    result = invoke(*extract_args(tiny_models, data, sandbox.cache))
    assert result.exit_code == 0 and "resumed and completed" in result.output, result.output
    sandbox.assert_outside_untouched()
    assert (sandbox.cache / "validation" / "notes.txt").read_text() == "not layercache's"
    assert_complete(sandbox.cache)


def test_a_listed_shard_that_is_a_fifo_is_reextracted_without_opening_it(tiny_models, data, sandbox):
    """Guard: a resume counts a listed shard that is not a regular file as damaged and writes it anew."""
    shard = sorted(sandbox.cache.glob("train/shard-*.h5"))[0]
    shard.unlink()
    os.mkfifo(shard)
    with no_hang():
        result = invoke(*extract_args(tiny_models, data, sandbox.cache), "--repair")
    assert result.exit_code == 0, result.output
    assert shard.is_file() and not shard.is_fifo()
    assert_complete(sandbox.cache)


# --- side files and the manifest --------------------------------------------------------------------
def test_a_manifest_that_is_a_link_is_refused(tiny_models, data, sandbox):
    """The link is refused, not written through (35f1445 replaced it by rename, which was safe too)."""
    path = sandbox.cache / "manifest.json"
    shutil.copy(path, sandbox.outside / "manifest.json")
    sandbox.before = sandbox.state()
    path.unlink()
    path.symlink_to(sandbox.outside / "manifest.json")
    with pytest.raises(LayercacheError, match=r"manifest.json.*(symbolic link|leads outside)"):
        lc.extract(str(tiny_models["bert"]), None, sandbox.cache, progress=False, shard_bytes=20_000,
                   batch_tokens=64, split_files={k: str(v) for k, v in data.items()})
    sandbox.assert_outside_untouched()


def test_a_side_file_that_is_a_link_is_replaced_never_written_through(tiny_models, data, sandbox, tmp_path):
    """A link where ``vocab.json`` or a decoder's ``lens.safetensors`` should be is not the file (issue 36): extraction
    removes the link itself and writes the real file, the same bytes; what the link points at stays as it was."""
    path = sandbox.cache / "vocab.json"
    original = path.read_bytes()
    shutil.copy(path, sandbox.outside / "vocab.json")
    sandbox.before = sandbox.state()
    path.unlink()
    path.symlink_to(sandbox.outside / "vocab.json")
    result = lc.extract(str(tiny_models["bert"]), None, sandbox.cache, progress=False, shard_bytes=20_000,
                        batch_tokens=64, split_files={k: str(v) for k, v in data.items()})
    assert result.rewritten == ["vocab.json"] and not path.is_symlink() and path.read_bytes() == original
    sandbox.assert_outside_untouched()

    out = tmp_path / "decoder" / "cache"
    lc.extract(str(tiny_models["gpt2"]), str(data["validation"]), out, progress=False)
    outside = tmp_path / "decoder" / "outside"
    outside.mkdir()
    lens = (out / "lens.safetensors").read_bytes()
    (out / "lens.safetensors").rename(outside / "lens.safetensors")
    (out / "lens.safetensors").symlink_to(outside / "lens.safetensors")
    before = tree_state(outside)
    result = lc.extract(str(tiny_models["gpt2"]), str(data["validation"]), out, progress=False)
    assert result.rewritten == ["lens.safetensors"] and (out / "lens.safetensors").read_bytes() == lens
    assert not (out / "lens.safetensors").is_symlink() and tree_state(outside) == before


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tiny_models, data, sandbox):
    manifest = sandbox.cache / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    with no_hang():
        assert_refused(invoke("info", sandbox.cache), "FIFO")
        assert_refused(invoke(*extract_args(tiny_models, data, sandbox.cache), "--overwrite"), "FIFO")
    sandbox.assert_outside_untouched()


def test_a_clean_cache_is_untouched_by_these_checks(tiny_models, data, sandbox):
    """The gate costs nothing to a normal resume: a complete cache stays byte for byte as it was."""
    shards = {p.name: p.read_bytes() for p in sandbox.cache.glob("*/shard-*.h5")}
    result = invoke(*extract_args(tiny_models, data, sandbox.cache))
    assert result.exit_code == 0 and "already complete" in result.output, result.output
    assert {p.name: p.read_bytes() for p in sandbox.cache.glob("*/shard-*.h5")} == shards
    assert len(shards) >= 3


def test_an_out_folder_given_through_a_link_is_the_users_choice(tiny_models, data, tmp_path):
    """Guard: only links *inside* a cache are refused; ``--out`` itself may be a link to a real folder."""
    real = tmp_path / "fast-disk" / "cache"
    real.mkdir(parents=True)
    (tmp_path / "cache-link").symlink_to(real, target_is_directory=True)
    result = invoke(*extract_args(tiny_models, data, tmp_path / "cache-link"))
    assert result.exit_code == 0, result.output
    assert_complete(real)
    assert invoke(*extract_args(tiny_models, data, tmp_path / "cache-link")).exit_code == 0  # resumes through it
