"""``extract`` and ``info`` (cli/cache.py): every --split NAME=PATH file recorded and shown by info; a data source's
warnings printed as layercache warnings, not as Python's."""

from __future__ import annotations

import shutil

from cli_support import invoke

import layercache as lc


def test_every_split_file_is_recorded_and_shown(tiny_models, tsv, tmp_path):
    dev = shutil.copy(tsv, tmp_path / "dev.tsv")
    out = tmp_path / "cache"
    result = invoke("extract", tiny_models["bert"], "--split", f"train={tsv}", "--split", f"validation={dev}",
                    "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert lc.read_manifest(out).dataset.files == {"train": str(tsv), "validation": str(dev)}
    shown = "".join(invoke("info", out).output.split())  # rich may wrap long paths anywhere
    assert f"train:{tsv};validation:{dev}" in shown


def test_source_warnings_are_shown_as_layercache_warnings(tiny_models, tmp_path):
    one = tmp_path / "one.tsv"
    one.write_text("text\tlabel\nthe lamp is good\tpos\nthe cup is fine\tpos\n")
    result = invoke("extract", tiny_models["bert"], one, "--out", tmp_path / "a", "--quiet")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "WARNING Label column 'label' has a single class 'pos'" in text, text
    assert "UserWarning" not in text and "warnings.warn" not in text
    run_on = tmp_path / "run-on.conll"
    run_on.write_text("The O\nlamp B-OBJ\nworks O\n. O\nIt O\nis O\nbright B-ADJ\n. O\n")
    result = invoke("extract", tiny_models["bert"], run_on, "--out", tmp_path / "b", "--quiet")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "WARNING" in text and "has no blank lines between sentences" in text, text
    assert "UserWarning" not in text


def test_info_check_names_damaged_shards_and_side_files_with_the_one_fix(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet").exit_code == 0
    clean = invoke("info", out, "--check")
    assert clean.exit_code == 0 and "All 1 shards and 1 side file match their checksums." in clean.output
    (out / "vocab.json").unlink()
    shard = next(out.glob("train/shard-*.h5"))
    shard.write_bytes(shard.read_bytes()[:-10])
    damaged = invoke("info", out, "--check")
    text = " ".join(damaged.output.split())
    assert damaged.exit_code == 1, text
    assert (f"1 shard(s) and 1 side file(s) missing, unreadable or changed since extraction: train/{shard.name} "
            "(changed since extraction), vocab.json (missing). Re-run the `layercache extract` command that made "
            "the cache with --repair to re-extract only those shards and write those side files again.") in text
    repaired = invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet", "--repair")
    text = " ".join(repaired.output.split())
    assert repaired.exit_code == 0 and "repaired (1 shard(s) re-extracted; vocab.json written again)" in text, text
    assert invoke("info", out, "--check").exit_code == 0
