"""The files extraction writes beside the shards (``vocab.json``, ``lens.safetensors``): written atomically,
listed in the manifest with their checksums, checked on read, kept by a resume, added to an older cache
by the same command, removed by --overwrite, and outside the configuration hash."""

from __future__ import annotations

import json
import os

import pytest
import transformers
from fs_support import no_hang
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import layercache as lc
import layercache.extraction.steps as steps
from layercache.errors import CacheError
from layercache.extraction.side_files import word_markers
from layercache.store.manifest import read_manifest
from layercache.store.vocabulary import Vocabulary, WordMarkers


def extract(model, data, out, **options):
    return lc.extract(str(model), str(data), out, progress=False, **options)


def test_the_vocabulary_is_the_tokenizers_own_pieces(tiny_models, tsv, tmp_path):
    result = extract(tiny_models["bert"], tsv, tmp_path / "cache")
    entry = result.manifest.side_files["vocabulary"]
    assert (entry.file, entry.bytes) == ("vocab.json", (tmp_path / "cache" / "vocab.json").stat().st_size)
    vocabulary = lc.LayerCache.open(result.path).vocabulary()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_models["bert"])
    assert list(vocabulary.tokens) == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert vocabulary.special_ids == frozenset(tokenizer.all_special_ids)
    assert vocabulary.markers == WordMarkers(continuation="##")
    assert vocabulary.tokenizer_fingerprint == result.manifest.tokenizer.fingerprint
    manifest_keys = json.loads((result.path / "manifest.json").read_text()).keys()
    assert "side_files" in manifest_keys


def test_an_older_cache_opens_and_gets_its_files_from_the_same_command(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    first = extract(tiny_models["gpt2"], tsv, out)
    assert set(first.manifest.side_files) == {"vocabulary", "lens"}
    # As a cache written before the side files existed: no manifest entry, no files.
    data = json.loads((out / "manifest.json").read_text())
    del data["side_files"]
    (out / "manifest.json").write_text(json.dumps(data))
    (out / "vocab.json").unlink()
    (out / "lens.safetensors").unlink()
    cache = lc.LayerCache.open(out)
    assert cache.num_examples("train") == 12 and len(cache.tokens("train", [0])) == 1  # the rest reads as before
    with pytest.raises(CacheError, match="no tokenizer vocabulary .* run the same `layercache extract` command"):
        cache.vocabulary()
    with pytest.raises(CacheError, match="no logit-lens weights"):
        cache.lens_weights()

    again = extract(tiny_models["gpt2"], tsv, out)
    assert again.already_complete and again.manifest.config_hash == first.manifest.config_hash
    assert again.manifest.side_files == first.manifest.side_files  # the same bytes as the first run's
    reopened = lc.LayerCache.open(out)
    assert reopened.vocabulary() == lc.LayerCache.open(out).vocabulary()
    assert reopened.lens_weights().vocab_size == len(reopened.vocabulary())


def test_a_changed_vocabulary_is_refused(tiny_models, tsv, tmp_path):
    out = extract(tiny_models["bert"], tsv, tmp_path / "cache").path
    size = len(lc.LayerCache.open(out).vocabulary())
    text = (out / "vocab.json").read_text()
    (out / "vocab.json").write_text(text.replace("[MASK]", "[MASQ]"))
    with pytest.raises(CacheError, match="changed since extraction"):
        lc.LayerCache.open(out).vocabulary()
    (out / "vocab.json").unlink()
    with pytest.raises(CacheError, match="cannot be read"):
        lc.LayerCache.open(out).vocabulary()
    assert extract(tiny_models["bert"], tsv, out).already_complete
    assert len(lc.LayerCache.open(out).vocabulary()) == size  # rewritten whole by the resumed extraction


@pytest.mark.parametrize("how, problem", [
    ("deleted", "missing"), ("changed", "changed since extraction"),
    ("fifo", "is a FIFO (named pipe), not a regular file"), ("link", "is a symbolic link, not a regular file"),
    ("folder", "is a folder, not a regular file")])
def test_side_file_problems_name_what_is_wrong_without_opening_a_fifo(tiny_models, tsv, tmp_path, how, problem):
    out = extract(tiny_models["bert"], tsv, tmp_path / "cache").path
    path = out / "vocab.json"
    assert lc.LayerCache.open(out).side_file_problems() == {}
    data = path.read_bytes()
    path.unlink()
    if how == "changed":
        path.write_bytes(data.replace(b"[MASK]", b"[MASQ]"))
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "link":  # even to the very bytes: extraction writes only real files in the cache
        (tmp_path / "copy.json").write_bytes(data)
        path.symlink_to(tmp_path / "copy.json")
    elif how == "folder":
        path.mkdir()
    with no_hang(30):
        assert lc.LayerCache.open(out).side_file_problems() == {"vocab.json": problem}


def test_a_fifo_in_place_of_a_side_file_is_refused_by_its_reader_without_blocking(tiny_models, tsv, tmp_path):
    out = extract(tiny_models["gpt2"], tsv, tmp_path / "cache", project=4).path
    for name, read in (("vocab.json", "vocabulary"), ("lens.safetensors", "lens_weights"),
                       ("projection.safetensors", "projection")):
        (out / name).unlink()
        os.mkfifo(out / name)
        with no_hang(30), pytest.raises(CacheError, match=rf"{name}.*(FIFO|missing or has changed)"):
            getattr(lc.LayerCache.open(out), read)()


def test_the_manifest_allows_only_the_known_side_file_names(tiny_models, tsv, tmp_path):
    out = extract(tiny_models["bert"], tsv, tmp_path / "cache").path
    data = json.loads((out / "manifest.json").read_text())
    for bad, fragment in ((dict(data["side_files"]["vocabulary"], file="../vocab.json"), "side_files.vocabulary.file"),
                          (dict(data["side_files"]["vocabulary"], file="lens.safetensors"), "should be 'vocab.json'"),
                          (dict(data["side_files"]["vocabulary"], checksum="md5:00"), "checksum")):
        (out / "manifest.json").write_text(json.dumps({**data, "side_files": {"vocabulary": bad}}))
        with pytest.raises(CacheError, match=fragment):
            read_manifest(out)
    unknown = {"weights": data["side_files"]["vocabulary"]}
    (out / "manifest.json").write_text(json.dumps({**data, "side_files": unknown}))
    with pytest.raises(CacheError, match="side_files key"):
        read_manifest(out)


def test_a_resume_keeps_the_side_files_and_overwrite_removes_them(tiny_models, tsv, tmp_path, monkeypatch):
    out = tmp_path / "cache"
    write_batch = steps._write_batch

    def stop_at_the_third_batch(shards, b, *args):
        if b == 2:
            raise RuntimeError("stopped")
        return write_batch(shards, b, *args)

    monkeypatch.setattr(steps, "_write_batch", stop_at_the_third_batch)
    with pytest.raises(RuntimeError, match="stopped"):
        extract(tiny_models["gpt2"], tsv, out, batch_size=2, shard_bytes=1)
    interrupted = read_manifest(out)
    assert not interrupted.complete and set(interrupted.side_files) == {"vocabulary", "lens"}
    monkeypatch.setattr(steps, "_write_batch", write_batch)
    resumed = extract(tiny_models["gpt2"], tsv, out, batch_size=2, shard_bytes=1)
    assert resumed.resumed and resumed.manifest.side_files == interrupted.side_files
    assert lc.LayerCache.open(out).lens_weights().normed_last

    # --overwrite with an encoder: the decoder's lens file goes with the rest of the old cache.
    replaced = extract(tiny_models["bert"], tsv, out, overwrite=True)
    assert set(replaced.manifest.side_files) == {"vocabulary"}
    assert not (out / "lens.safetensors").exists()
    assert lc.LayerCache.open(out).vocabulary().special_ids == frozenset({0, 1, 2, 3, 4})


def _trained(pre_tokenizer, decoder, model) -> transformers.PreTrainedTokenizerFast:
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    alphabet = pre_tokenizers.ByteLevel.alphabet() if isinstance(pre_tokenizer, pre_tokenizers.ByteLevel) else []
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<s>"], initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(["the cat sat on the mat , and the dog ran — fast !"] * 5, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>")


def test_word_markers_and_surfaces_of_each_kind_of_tokenizer():
    byte_level = _trained(pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), models.BPE())
    assert word_markers(byte_level) == WordMarkers(byte_level=True)
    metaspace = _trained(pre_tokenizers.Metaspace(replacement="▁"), decoders.Metaspace(replacement="▁"),
                         models.BPE())
    assert word_markers(metaspace) == WordMarkers(word_start="▁")
    fallback = _trained(pre_tokenizers.Metaspace(replacement="▁"), decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]), models.BPE(byte_fallback=True))
    assert word_markers(fallback) == WordMarkers(word_start="▁", byte_fallback=True)

    tokens = ("Ġ,", "Ġthe", "âĢĶ", "Ġ", "<|endoftext|>", "Ċ")
    surfaces = Vocabulary(tokens, frozenset(), WordMarkers(byte_level=True), "").surfaces
    assert surfaces == (",", "the", "—", " ", "<|endoftext|>", "\n")
    tokens = ("▁,", "▁the", "ing", "▁", "<0x2C>", None)
    surfaces = Vocabulary(tokens, frozenset(), WordMarkers(word_start="▁", byte_fallback=True), "").surfaces
    assert surfaces == (",", "the", "ing", "▁", ",", "")
    tokens = ("##.", "##ing", "##", "[CLS]", "the</w>")
    surfaces = Vocabulary(tokens, frozenset(), WordMarkers(continuation="##", word_end="</w>"), "").surfaces
    assert surfaces == (".", "ing", "##", "[CLS]", "the")
