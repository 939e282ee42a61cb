"""A damaged side file (issue 36): ``vocab.json``, ``lens.safetensors`` or ``projection.safetensors`` deleted, cut,
changed or replaced by a link is named by ``info --check`` (exit 1), and the same ``extract`` (as it is, or with
--repair) writes it again with the bytes extraction wrote: the vocabulary and the lens from the model, the
projection fitted again on the same seeded sample. A projection that fit does not reproduce is refused in one
sentence and left as it is; a folder in a side file's place is refused, with what it holds kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_support import assert_refused, invoke
from fs_support import make_outside, tree_state
from shard_support import shard_contents

import layercache as lc
import layercache.extraction.side_files as side_files

SIDE_FILES = ("vocab.json", "lens.safetensors", "projection.safetensors")
OPTIONS = ("--project", "8", "--batch-size", "4", "--shard-size", "1", "--quiet", "--threads", "1")


@pytest.fixture(scope="module")
def projected(tiny_models, tmp_path_factory, one_torch_thread):
    """A complete projected decoder cache (every kind of side file), its data file, and its side files' bytes."""
    root = tmp_path_factory.mktemp("projected")
    data = root / "reviews.tsv"
    data.write_text("text\tlabel\n" + "".join(
        f"the lamp {'is good' if i % 2 else 'is not good'} today {'and the keys are bad ' * (i % 3)}\t"
        f"{'pos' if i % 2 else 'neg'}\n" for i in range(12)))
    cache = root / "cache"
    assert invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS).exit_code == 0
    assert set(lc.read_manifest(cache).side_files) == {"vocabulary", "lens", "projection"}
    return data, cache, {name: (cache / name).read_bytes() for name in SIDE_FILES}


def fresh_copy(cache: Path, where: Path) -> Path:
    copy = where / "cache"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(cache, copy, symlinks=True)
    return copy


def damage(path: Path, how: str, outside: Path) -> None:
    """Delete, cut, flip a byte of, or replace by a link to a copy of the same bytes (outside the cache)."""
    data = path.read_bytes()
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        path.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif how == "link":
        (outside / path.name).write_bytes(data)
        path.unlink()
        path.symlink_to(outside / path.name)
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["deleted", "truncated", "flipped", "link"])
@pytest.mark.parametrize("name", SIDE_FILES)
def test_info_check_names_a_damaged_side_file_and_extract_writes_the_same_bytes(tiny_models, projected, tmp_path,
                                                                               name, how):
    data, pristine, original = projected
    cache, outside = fresh_copy(pristine, tmp_path), make_outside(tmp_path / "outside")
    damage(cache / name, how, outside)
    before = tree_state(outside)
    problem = {"deleted": "missing", "link": "is a symbolic link, not a regular file"}.get(how,
                                                                                          "changed since extraction")
    checked = invoke("info", cache, "--check")
    text = " ".join(checked.output.split())
    assert checked.exit_code == 1 and f"{name} ({problem})" in text and "--repair" in text, text
    assert lc.LayerCache.open(cache).side_file_problems() == {name: problem}

    result = invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS)
    assert result.exit_code == 0 and f"Cache repaired ({name} written again)" in " ".join(result.output.split()), \
        result.output
    assert (cache / name).read_bytes() == original[name] and not (cache / name).is_symlink()
    assert tree_state(outside) == before  # a link is replaced, what it pointed at is never written
    assert invoke("info", cache, "--check").exit_code == 0


def test_repair_writes_every_damaged_side_file_again_and_says_so(tiny_models, projected, tmp_path):
    data, pristine, original = projected
    cache = fresh_copy(pristine, tmp_path)
    for name in SIDE_FILES:
        damage(cache / name, "flipped", tmp_path)
    result = lc.extract(str(tiny_models["gpt2"]), str(data), cache, project=8, batch_size=4, shard_bytes=1,
                        repair=True, progress=False)
    assert result.already_complete and not result.repaired  # no state was computed again
    assert sorted(result.rewritten) == sorted(SIDE_FILES)
    assert {name: (cache / name).read_bytes() for name in SIDE_FILES} == original
    again = invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS, "--repair")
    assert again.exit_code == 0 and "checked, nothing to repair" in again.output, again.output


def test_a_projection_that_fits_otherwise_is_refused_and_left_as_it_is(tiny_models, projected, tmp_path,
                                                                       monkeypatch):
    """Another machine's arithmetic: the fit gives other bytes, which would read every stored state wrongly."""
    data, pristine, _ = projected
    cache = fresh_copy(pristine, tmp_path)
    damage(cache / "projection.safetensors", "flipped", tmp_path)
    damaged = (cache / "projection.safetensors").read_bytes()
    fit = side_files.fit_projection

    def other_arithmetic(*args, **kwargs):
        projection = fit(*args, **kwargs)
        projection.mean += 1e-6
        return projection

    monkeypatch.setattr(side_files, "fit_projection", other_arithmetic)
    for repair in ((), ("--repair",)):
        assert_refused(invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS, *repair),
                       "projection.safetensors is damaged (changed since extraction)",
                       "does not give the bytes extraction wrote", "re-extract with --overwrite")
        assert (cache / "projection.safetensors").read_bytes() == damaged


def test_a_folder_in_a_side_files_place_is_refused_and_kept(tiny_models, projected, tmp_path):
    data, pristine, _ = projected
    cache = fresh_copy(pristine, tmp_path)
    for name in ("vocab.json", "projection.safetensors"):
        (cache / name).unlink()
        (cache / name).mkdir()
        (cache / name / "notes.txt").write_text("someone's own file\n")
        checked = invoke("info", cache, "--check")
        assert checked.exit_code == 1 and f"{name} (is a folder, not a regular file)" in checked.output
        assert_refused(invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS, "--repair"),
                       f"{name} is a folder", "move it away")
        assert (cache / name / "notes.txt").read_text() == "someone's own file\n"
        shutil.rmtree(cache / name)
        assert invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS).exit_code == 0


def test_a_resume_fits_a_damaged_projection_again_and_completes_the_same_cache(tiny_models, projected, tmp_path):
    data, pristine, original = projected
    cache = fresh_copy(pristine, tmp_path)
    manifest = json.loads((cache / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    for shard in train["shards"][1:]:  # as if stopped after the first shard
        os.unlink(cache / shard["file"])
    train.update(shards=train["shards"][:1], complete=False, stats={})
    manifest["complete"] = False
    (cache / "manifest.json").write_text(json.dumps(manifest))
    (cache / "projection.safetensors").unlink()
    result = invoke("extract", tiny_models["gpt2"], data, "--out", cache, *OPTIONS)
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "resumed and completed (projection.safetensors written again)" in text, text
    assert (cache / "projection.safetensors").read_bytes() == original["projection.safetensors"]
    expected, resumed = shard_contents(pristine), shard_contents(cache)
    assert resumed.keys() == expected.keys()
    for key in expected:
        assert (resumed[key] == expected[key]).all(), key


@pytest.mark.parametrize("how", ["deleted", "flipped"])
def test_a_standardized_basis_is_fitted_again_to_the_bytes_extraction_wrote(tiny_models, projected, tmp_path, how):
    """``--project-basis standardized``: the same seeded sample gives the same scale and rows, so --repair writes
    the file back byte for byte (kind, scale and all), as it does a pca basis."""
    data = projected[0]
    cache = tmp_path / "standardized"
    options = (*OPTIONS, "--project-basis", "standardized")
    assert invoke("extract", tiny_models["gpt2"], data, "--out", cache, *options).exit_code == 0
    original = (cache / "projection.safetensors").read_bytes()
    damage(cache / "projection.safetensors", how, tmp_path)
    result = invoke("extract", tiny_models["gpt2"], data, "--out", cache, *options, "--repair")
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "repaired (projection.safetensors written again)" in text, text
    assert (cache / "projection.safetensors").read_bytes() == original
    assert lc.LayerCache.open(cache).projection().kind == "standardized"
