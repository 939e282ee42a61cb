"""The command line: happy path, and every bad input ends in one sentence with exit code 2."""

from __future__ import annotations

import json
import re

import pytest
from cli_support import assert_refused, invoke

import layercache as lc
from layercache.cli import parse_size


def test_extract_then_info_and_list(tiny_models, tsv, tmp_path):
    result = invoke("extract", tiny_models["bert"], tsv, "--quiet")
    assert result.exit_code == 0, result.output
    assert "Cache written" in result.output
    info = invoke("info")  # no argument: the most recent cache
    assert info.exit_code == 0, info.output
    for fact in ("complete", "encoder", "BertModel", "float16", "train", "12", "label (sequence, 2 classes)"):
        assert fact in info.output
    again = invoke("extract", tiny_models["bert"], tsv, "--quiet")
    assert again.exit_code == 0 and "already complete" in again.output
    listing = invoke("list")
    assert listing.exit_code == 0 and "reviews" in listing.output
    as_json = invoke("info", "--json")
    assert as_json.exit_code == 0 and '"config_hash"' in as_json.output


def test_info_check_finds_a_changed_shard(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet").exit_code == 0
    clean = invoke("info", out, "--check")
    assert clean.exit_code == 0 and "match their checksums" in clean.output
    shard = sorted(out.glob("train/shard-*.h5"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit pattern somewhere in the token states
    shard.write_bytes(bytes(data))
    with lc.LayerCache.open(out) as cache:
        assert cache.damaged_shards() == [f"train/{shard.name}"]
    damaged = invoke("info", out, "--check")
    assert damaged.exit_code == 1 and shard.name in damaged.output and "--repair" in damaged.output


def test_split_files_and_layers(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    result = invoke("extract", tiny_models["bert"], "--split", f"train={tsv}", "--split", f"validation={tsv}",
                    "--layers", "0,-1", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    cache = lc.LayerCache.open(out)
    assert cache.splits == ["train", "validation"] and cache.layer_names == ["embeddings", "layer_2"]


def test_unknown_model_folder(tsv, tmp_path):
    assert_refused(invoke("extract", tmp_path / "no-such-model", tsv), "does not exist")


def test_unknown_hub_model(tsv):
    assert_refused(invoke("extract", "no-such-org/no-such-model", tsv), "Could not load model")


def test_unknown_dataset(tiny_models):
    assert_refused(invoke("extract", tiny_models["bert"], "no-such-dataset-xyz"), "Could not load dataset")


def test_missing_column_lists_the_available_ones(tiny_models, tsv):
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--text-column", "body"), "body", "text", "label")


def test_empty_file(tiny_models, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n")
    assert_refused(invoke("extract", tiny_models["bert"], empty), "no examples")


def test_absent_label_column(tiny_models, tmp_path):
    path = tmp_path / "texts.csv"
    path.write_text("text\nthe lamp is good\nthe keys are bad\n")
    assert_refused(invoke("extract", tiny_models["bert"], path), "--no-labels")
    ok = invoke("extract", tiny_models["bert"], path, "--no-labels", "--out", tmp_path / "c", "--quiet")
    assert ok.exit_code == 0, ok.output
    assert lc.LayerCache.open(tmp_path / "c").tasks == []


def test_non_empty_output_folder_is_refused(tiny_models, tsv, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", out), "not empty")
    assert (out / "notes.txt").read_text() == "keep me"
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", out, "--overwrite"), "not empty")


def test_output_path_that_is_a_file(tiny_models, tsv, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", target), "is a file")


def test_too_little_disk_writes_nothing(tiny_models, tsv, tmp_path, monkeypatch):
    import layercache.extraction.job as job

    monkeypatch.setattr(job, "free_disk_bytes", lambda path: 1000)
    out = tmp_path / "cache"
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", out), "free", "--store pooled")
    assert not out.exists()


def test_other_configuration_into_an_existing_cache(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet").exit_code == 0
    before = lc.read_manifest(out)
    assert_refused(invoke("extract", tiny_models["gpt2"], tsv, "--out", out), "different model", "--overwrite")
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", out, "--layers", "-1"), "different storage")
    assert lc.read_manifest(out).config_hash == before.config_hash  # the refused runs changed nothing
    replaced = invoke("extract", tiny_models["gpt2"], tsv, "--out", out, "--overwrite", "--quiet")
    assert replaced.exit_code == 0, replaced.output
    assert lc.read_manifest(out).model.kind == "decoder"


def test_a_cache_planned_by_an_older_layercache_is_refused_not_continued(tiny_models, tsv, tmp_path):
    """Its batch boundaries differ, so resuming it would misplace rows; the refusal names the cause."""
    out = tmp_path / "cache"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet").exit_code == 0
    path = out / "manifest.json"
    data = json.loads(path.read_text())
    del data["extraction"]["planner"]  # what a manifest from before the planner was recorded holds
    data["config_hash"], data["complete"] = "0" * 16, False
    path.write_text(json.dumps(data))
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", out), "batch planner", "--overwrite")
    assert json.loads(path.read_text()) == data  # nothing touched


@pytest.mark.parametrize("option, value, fragment", [
    ("--layers", "layer_7", "does not exist"),
    ("--stride", "500", "--stride 500"),
    ("--shard-size", "lots", "not understood"),
    ("--store", "everything", "--store 'everything'"),
    ("--pooling", "max", "'max' is not known"),
    ("--storage-dtype", "int3", "not supported"),
    ("--max-length", "5000", "--max-length 5000"),
    ("--device", "cuda", "no CUDA GPU"),
    ("--limit", "0", "--limit must be at least 1"),
])
def test_bad_option_values(tiny_models, tsv, option, value, fragment):
    assert_refused(invoke("extract", tiny_models["bert"], tsv, option, value), fragment)


def test_info_on_a_folder_that_is_not_a_cache(tmp_path):
    assert_refused(invoke("info", tmp_path), "not a layercache cache")
    assert_refused(invoke("info", tmp_path / "missing"), "No cache at")


def test_info_without_any_cache():
    assert_refused(invoke("info"), "no recent cache")


def test_parse_size():
    assert parse_size("256MiB") == 256 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("4096") == 4096


@pytest.mark.parametrize("command, defaults", [
    ("train-head", ["the most recent one", "a new folder beside the cache", "every task in the cache",
                    "the mixer's and head's default"]),
    ("eval", ["the most recent one"]),
    ("info", ["the most recent one"]),
    ("extract", ["under $LAYERCACHE_HOME", "the model's"]),
    ("list", []),
])
def test_help_has_no_stray_spaces_and_keeps_its_defaults(command, defaults):
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    lines = [line.strip(" │╭╮╰╯─") for line in result.output.splitlines()]
    text = re.sub(r"\s+", " ", " ".join(line for line in lines if line))
    for stray in (" .", " ;", " ,"):
        assert stray not in text, (stray, text)
    for default in defaults:
        assert default in text, (default, text)
