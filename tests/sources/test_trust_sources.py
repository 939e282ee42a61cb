"""A cache you can trust, sources side: fingerprints that see every weight, safetensors unless pickle is
allowed, empty rows skipped and counted, warnings on degenerate labels. That extract records every split file and
info shows them is tested in tests/cli/test_cache.py."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
import transformers
from cli_support import assert_refused, invoke
from safetensors.torch import load_file, save_file
from tiny_models import HIDDEN, pickle_only_copy

import layercache as lc
from layercache.backbone.loader import load_backbone, model_fingerprint, tokenizer_fingerprint
from layercache.errors import DatasetError, ModelLoadError
from layercache.report.info import cache_summary
from layercache.sources.datasets import load_dataset_records
from layercache.sources.formats.conll import read_conll

MIDDLE = "encoder.layer.0.attention.self.query.weight"
"""A weight of the tiny BERT's first block: neither among its first nor its last tensors."""


def _altered_copy(source, folder):
    """``source`` with one middle-layer weight nudged: same config, same tokenizer, other weights."""
    shutil.copytree(source, folder)
    tensors = load_file(folder / "model.safetensors")
    tensors[MIDDLE] = tensors[MIDDLE] + 0.01
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def altered_bert(tiny_models, tmp_path_factory):
    return _altered_copy(tiny_models["bert"], tmp_path_factory.mktemp("altered") / "bert")


# ---------------------------------------------------------------- 1. fingerprints


def test_fingerprint_covers_a_middle_layer(tiny_models, altered_bert):
    a = load_backbone(str(tiny_models["bert"]), device="cpu")
    b = load_backbone(str(altered_bert), device="cpu")
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint.startswith("xxh3_128-files:")
    assert a.tokenizer_fingerprint == b.tokenizer_fingerprint


def test_fingerprint_does_not_depend_on_the_forward_dtype(tiny_models):
    fp32 = load_backbone(str(tiny_models["bert"]), device="cpu", dtype="float32")
    bf16 = load_backbone(str(tiny_models["bert"]), device="cpu", dtype="bfloat16")
    assert fp32.fingerprint == bf16.fingerprint


def test_a_model_without_files_hashes_every_tensor():
    config = transformers.BertConfig(vocab_size=50, hidden_size=HIDDEN, num_hidden_layers=3, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=16)
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    before = model_fingerprint(model)
    with torch.no_grad():
        model.encoder.layer[1].output.dense.weight[0, 0] += 0.01
    assert model_fingerprint(model) != before
    assert before.startswith("xxh3_128-tensors:")


def test_tokenizer_fingerprint_covers_settings_and_not_call_state(tiny_models):
    tokenizer = load_backbone(str(tiny_models["bert"]), device="cpu").tokenizer
    first = tokenizer_fingerprint(tokenizer)
    tokenizer(["the lamp is good today"] * 2, truncation=True, max_length=5, padding=True)
    assert tokenizer_fingerprint(tokenizer) == first  # a call's truncation/padding state is not the tokenizer
    tokenizer.truncation_side = "left"
    assert tokenizer_fingerprint(tokenizer) != first
    tokenizer.truncation_side = "right"
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENT]"]})
    assert tokenizer_fingerprint(tokenizer) != first


def test_extract_refuses_another_model_into_a_complete_cache(tiny_models, altered_bert, tsv, tmp_path):
    out = tmp_path / "cache"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet").exit_code == 0
    assert_refused(invoke("extract", altered_bert, tsv, "--out", out, "--quiet"), "different model")


def test_extract_refuses_to_resume_with_another_model(tiny_models, altered_bert, tsv, tmp_path):
    out = tmp_path / "cache"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet").exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())  # as a run killed before its first commit
    manifest["complete"] = False
    for split in manifest["splits"].values():
        split.update(complete=False, shards=[], stats={})
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert_refused(invoke("extract", altered_bert, tsv, "--out", out, "--quiet"), "different model")
    resumed = invoke("extract", tiny_models["bert"], tsv, "--out", out, "--quiet")
    assert resumed.exit_code == 0 and "resumed" in resumed.output, resumed.output


def test_eval_refuses_a_cache_of_another_model(tiny_models, altered_bert, tsv, tmp_path):
    cache_a, cache_b, run = tmp_path / "a", tmp_path / "b", tmp_path / "run"
    assert invoke("extract", tiny_models["bert"], tsv, "--out", cache_a, "--quiet").exit_code == 0
    assert invoke("extract", altered_bert, tsv, "--out", cache_b, "--quiet").exit_code == 0
    trained = invoke("train-head", cache_a, "--mixer", "scalar", "--epochs", "1", "--out", run, "--quiet")
    assert trained.exit_code == 0, trained.output
    assert invoke("eval", run, cache_a, "--split", "train").exit_code == 0
    assert_refused(invoke("eval", run, cache_b, "--split", "train"), "different backbone weights")


# ---------------------------------------------------------------- 2. pickle weights


def test_pickle_weights_load_only_when_allowed(tiny_models, tsv, tmp_path):
    folder = pickle_only_copy(tiny_models["bert"], tmp_path / "pickled")
    with pytest.raises(ModelLoadError, match="pickle files can run arbitrary code when loaded; pass allow_pickle=True"):
        load_backbone(str(folder), device="cpu")
    allowed = load_backbone(str(folder), device="cpu", allow_pickle=True)
    assert allowed.fingerprint.startswith("xxh3_128-files:")
    assert_refused(invoke("extract", folder, tsv, "--out", tmp_path / "c1", "--quiet"), "pickle", "--allow-pickle",
                   "safetensors")
    result = invoke("extract", folder, tsv, "--out", tmp_path / "c2", "--quiet", "--allow-pickle")
    assert result.exit_code == 0, result.output


def test_safetensors_win_over_pickle_weights(tiny_models, altered_bert, tmp_path):
    folder = shutil.copytree(tiny_models["bert"], tmp_path / "both")
    torch.save(load_file(altered_bert / "model.safetensors"), folder / "pytorch_model.bin")
    both = load_backbone(str(folder), device="cpu", allow_pickle=True)
    only_safe = load_backbone(str(tiny_models["bert"]), device="cpu")
    assert both.fingerprint == only_safe.fingerprint
    weight = dict(both.model.named_parameters())[MIDDLE]
    assert torch.equal(weight, dict(only_safe.model.named_parameters())[MIDDLE])


# ---------------------------------------------------------------- 3. empty rows


def _reviews_with_empty_row(tmp_path):
    texts = ["the lamp is good today", "the lamp is not good", "", "a cup was not good at all", "the cup is good",
             "it is good"]
    path = tmp_path / "gap.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{'pos' if i % 2 else 'neg'}\n" for i, t in enumerate(texts)))
    return path, texts


def test_empty_row_is_skipped_counted_and_located(tiny_models, tmp_path, logged):
    path, texts = _reviews_with_empty_row(tmp_path)
    with logged.expect(rf"1 row of split 'train' \(file '{path}', line 4\) with empty text"):
        result = lc.extract(str(tiny_models["bert"]), str(path), tmp_path / "cache", progress=False)
    assert result.manifest.splits["train"].n_skipped_empty == 1
    with lc.LayerCache.open(result.path) as cache:
        assert cache.num_examples("train") == len(texts) - 1
        index = cache.example_index("train").tolist()
        assert sorted(index) == [0, 1, 3, 4, 5]
        tokenizer = load_backbone(str(tiny_models["bert"]), device="cpu").tokenizer
        after = index.index(3)  # the row after the empty one keeps its own source row
        assert cache.token_arrays("train", "input_ids", [after])[0].tolist() == tokenizer(texts[3])["input_ids"]
    shown = invoke("info", result.path)
    assert shown.exit_code == 0 and "skipped" in shown.output
    with lc.LayerCache.open(result.path) as cache:  # what info's table shows (its layout is the console's own)
        assert cache_summary(cache)["splits"]["train"]["skipped_empty"] == 1


def test_empty_rows_of_pairs_words_and_quoted_csv(tmp_path, logged):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"premise": p, "hypothesis": h, "label": i % 2}) for i, (p, h) in
                               enumerate([("a cat", "a pet"), ("a dog", " "), ("", "a bird"), ("a cow", "milk")])))
    with logged.expect(r"2 rows of split 'train' \(file .*pairs.jsonl', lines 2 and 3\)"):
        records = load_dataset_records(str(pairs))
    assert records.splits["train"].source_index == [0, 3] and records.splits["train"].n_skipped_empty == 2

    words = tmp_path / "words.jsonl"
    words.write_text("\n".join(json.dumps({"tokens": t, "tags": ["O"] * len(t)})
                               for t in [["a", "cat"], [], ["the", "dog"]]) + "\n")
    with logged.expect(r"line 2\) with empty word lists in column 'tokens'"):
        records = load_dataset_records(str(words))
    assert records.splits["train"].source_index == [0, 2] and records.splits["train"].n_skipped_empty == 1

    quoted = tmp_path / "quoted.csv"  # a quoted field spans two lines, and a blank line follows it
    quoted.write_text('text,label\n"one line\nand another",1\n\n"",0\nlast one,1\n')
    with logged.expect(r"line 5\) with empty text"):
        load_dataset_records(str(quoted))


def test_a_split_of_only_empty_rows_is_refused(tmp_path):
    path = tmp_path / "blank.csv"
    path.write_text("text,label\n,1\n  ,0\n")
    with pytest.raises(DatasetError, match="Every row of the file .* has empty text in column 'text'"):
        load_dataset_records(str(path))


def test_real_cr_file_with_an_empty_row(tiny_models, shared_data, tmp_path, logged):
    path = shared_data / "cr" / "train.tsv"
    if not path.is_file():
        pytest.skip(f"{path} is not in the shared data")
    with logged.expect(r"split 'train' \(file .*train.tsv', line 1763\)"):
        result = lc.extract(str(tiny_models["bert"]), str(path), tmp_path / "cache", limit=2000, progress=False)
    assert result.manifest.splits["train"].n_skipped_empty == 1
    with lc.LayerCache.open(result.path) as cache:
        index = set(cache.example_index("train").tolist())
    assert len(index) == 1999 and 1762 not in index and {1761, 1763} <= index


# ---------------------------------------------------------------- 4. degenerate labels


def test_single_class_label_column_warns(tmp_path, logged):
    path = tmp_path / "one.csv"
    path.write_text("text,label\nthe lamp is good,pos\nthe cup is good,pos\nit is fine,pos\n")
    with logged.expect(r"Label column 'label' has a single class 'pos'.*label_columns=\.\.\., or pass no_labels=True"):
        load_dataset_records(str(path))
    tags = tmp_path / "flat.conll"
    tags.write_text("the O\nlamp O\n\nit O\nworks O\n")
    with logged.expect("single class 'O'"):
        load_dataset_records(str(tags))
    two = tmp_path / "two.csv"
    two.write_text("text,label\nthe lamp is good,pos\nthe cup is bad,neg\n")
    with logged.none(), warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset_records(str(two))


def test_conll_file_without_blank_lines_warns(tmp_path, logged):
    path = tmp_path / "run-on.conll"
    path.write_text("The O\nlamp B-OBJ\nworks O\n. O\nIt O\nis O\nbright O\n. O\n")
    with logged.expect(r"no blank lines between sentences, so all 8 tokens form one example; "
                                         r"separate sentences with blank lines"):
        assert len(read_conll(path)) == 1
    fine = tmp_path / "fine.conll"
    fine.write_text("The O\nlamp B-OBJ\nworks O\n. O\n")
    with logged.none(), warnings.catch_warnings():
        warnings.simplefilter("error")
        read_conll(fine)
