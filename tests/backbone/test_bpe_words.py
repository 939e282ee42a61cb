"""Pre-split words (CoNLL input) must tokenize as the same words in running text (issue 14).

A fast tokenizer given words with ``is_split_into_words`` pre-tokenizes each word alone, so a
tokenizer that marks a word's leading space inside its pieces (byte-level BPE ``Ġ``, SentencePiece
``▁``) never sees the space: Llama 3 read ``WestIndianall-rounder…`` and "took" became ``t, ook``.
These tests use real BPE tokenizers trained offline (tests/tiny_models.py ``BPE_KINDS``).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import transformers
from cli_support import assert_refused, invoke
from tiny_models import BPE_KINDS, make_model, make_subword_tokenizer
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import layercache as lc
import layercache.backbone.loader as loader
import layercache.backbone.words as words_module
import layercache.extraction.tokenize as tokenize
from layercache.backbone.loader import load_backbone, tokenizer_fingerprint
from layercache.errors import DatasetError
from layercache.sources.datasets import load_dataset_records
from layercache.sources.records import SplitRecords

# The first sentences of CoNLL-2003's validation file, with their NER tags.
CONLL = """-DOCSTART- -X- -X- O

CRICKET NNP B-NP O
- : O O
LEICESTERSHIRE NNP B-NP B-ORG
TAKE NNP I-NP O
OVER IN B-PP O
AT NNP B-NP O
TOP NNP I-NP O
AFTER NNP I-NP O
INNINGS NNP I-NP O
VICTORY NN I-NP O
. . O O

LONDON NNP B-NP B-LOC
1996-08-30 CD I-NP O

West NNP B-NP B-MISC
Indian NNP I-NP I-MISC
all-rounder NN I-NP O
Phil NNP I-NP B-PER
Simmons NNP I-NP I-PER
took VBD B-VP O
four CD B-NP O
for IN B-PP O
38 CD B-NP O
on IN B-PP O
Friday NNP B-NP O
as IN B-PP O
Leicestershire NNP B-NP B-ORG
beat VBD B-VP O
Somerset NNP B-NP B-ORG
by IN B-PP O
an DT B-NP O
innings NN I-NP O
and CC O O
39 CD B-NP O
runs NNS I-NP O
in IN B-PP O
two CD B-NP O
days NNS I-NP O
to TO B-VP O
take VB I-VP O
over IN B-PP O
at IN B-PP O
the DT B-NP O
head NN I-NP O
of IN B-PP O
the DT B-NP O
county NN I-NP O
championship NN I-NP O
. . O O
"""
WEST_INDIAN = 2  # source row of the "West Indian all-rounder ..." sentence
SPACE_MARK = {"llama-bpe": "Ġ", "llama-sp": "▁"}
"""Kinds whose words lost their leading space before the fix, and the mark a word's space becomes."""


@pytest.fixture(scope="session")
def bpe_models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bpe-models")
    return {kind: make_model(root / kind, kind) for kind in BPE_KINDS}


@pytest.fixture
def conll(tmp_path):
    path = tmp_path / "valid.conll"
    path.write_text(CONLL)
    return path


def conll_words(row: int) -> list[str]:
    return [line.split()[0] for line in CONLL.split("\n\n")[row + 1].splitlines()]


def loaded_tokenizer(folder):
    """The tokenizer as extraction loads it for words (GPT-2's with ``add_prefix_space``)."""
    return load_backbone(str(folder), device="cpu", words_input=True).tokenizer


def content_ids(ids, word_ids) -> list[int]:
    """Ids of the word tokens only (specials such as <|begin_of_text|> carry word id -1)."""
    return [int(i) for i, w in zip(ids, word_ids) if w >= 0]


def extract(model_dir, conll, out, **options):
    result = lc.extract(str(model_dir), str(conll), out, progress=False, **options)
    cache = lc.LayerCache.open(result.path)
    rows = {int(src): row for row, src in enumerate(cache.example_index("train"))}
    return cache, rows


@pytest.mark.parametrize("kind", BPE_KINDS)
def test_extracted_words_have_the_ids_of_their_sentence(bpe_models, conll, tmp_path, kind):
    cache, rows = extract(bpe_models[kind], conll, tmp_path / "cache")
    tokenizer = loaded_tokenizer(bpe_models[kind])
    for source_row in range(3):
        row = rows[source_row]
        ids = cache.token_arrays("train", "input_ids", [row])[0]
        word_ids = cache.token_arrays("train", "word_ids", [row])[0]
        sentence = tokenizer(" ".join(conll_words(source_row)), add_special_tokens=False)["input_ids"]
        assert content_ids(ids, word_ids) == sentence


@pytest.mark.parametrize("kind", list(SPACE_MARK))
def test_word_initial_pieces_carry_the_space_mark_and_labels_align(bpe_models, conll, tmp_path, kind):
    cache, rows = extract(bpe_models[kind], conll, tmp_path / "cache")
    tokenizer = loaded_tokenizer(bpe_models[kind])
    row = rows[WEST_INDIAN]
    words = conll_words(WEST_INDIAN)
    pieces = tokenizer.convert_ids_to_tokens(cache.token_arrays("train", "input_ids", [row])[0].tolist())
    word_ids = cache.token_arrays("train", "word_ids", [row])[0]
    mark = SPACE_MARK[kind]
    firsts = {}
    for piece, w in zip(pieces, word_ids):
        firsts.setdefault(int(w), piece)
    firsts.pop(-1, None)
    assert sorted(firsts) == list(range(len(words)))  # every word has tokens, in order
    assert not firsts[0].startswith(mark)  # as at the start of the sentence
    assert all(firsts[w].startswith(mark) for w in range(1, len(words))), firsts
    assert f"{mark}took" in pieces and "ook" not in pieces
    # Each word's pieces spell that word (after its space), so word ids are right for every token...
    for w, word in enumerate(words):
        spelled = tokenizer.convert_tokens_to_string([p for p, k in zip(pieces, word_ids) if k == w])
        assert spelled.strip() == word
    # ... and the first-sub-token labels are the word's tags.
    ner = cache.manifest.task("ner")
    batch = cache.batch("train", [row], tasks=["ner"])
    labelled = batch.labels["ner"][0][batch.labels["ner"][0] >= 0].tolist()
    assert [ner.label_names[i] for i in labelled] == \
        [line.split()[-1] for line in CONLL.split("\n\n")[WEST_INDIAN + 1].splitlines()]


def test_windows_of_long_words_stitch_back_to_the_sentence(bpe_models):
    backbone = load_backbone(str(bpe_models["llama-bpe"]), device="cpu", words_input=True)
    words = conll_words(WEST_INDIAN)
    split = SplitRecords(words=[words])
    (example,) = tokenize.encode_split(backbone.tokenizer, split, max_length=16, stride=4, causal=True)
    assert example.n_rows > 1
    sentence = backbone.tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
    assert content_ids(example.stitched_ids(), example.word_ids) == sentence


def test_wordpiece_and_prefix_space_tokenizers_are_unchanged(tiny_models, bpe_models):
    words = conll_words(WEST_INDIAN)
    for folder in (tiny_models["bert"], tiny_models["gpt2"], tiny_models["roberta"], bpe_models["gpt2-bpe"]):
        backbone = load_backbone(str(folder), device="cpu", words_input=True)
        tok = backbone.tokenizer
        assert words_module.word_prefix(tok) == ""
        assert backbone.tokenizer_fingerprint == tokenizer_fingerprint(tok)  # as before the fix
        (example,) = tokenize.encode_split(tok, SplitRecords(words=[words]), max_length=backbone.max_length,
                                           stride=None, causal=backbone.is_causal)
        old = tok(words, is_split_into_words=True, truncation=True, max_length=backbone.max_length)
        assert example.windows[0].tolist() == old["input_ids"]
    gpt2 = load_backbone(str(bpe_models["gpt2-bpe"]), device="cpu", words_input=True).tokenizer
    assert gpt2.convert_ids_to_tokens(gpt2(words, is_split_into_words=True)["input_ids"])[:2] == ["ĠWest", "ĠIndian"]


def test_word_prefix_is_found_per_tokenizer(tmp_path):
    def loaded(kind, **options):
        folder = tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}"
        make_subword_tokenizer(folder, kind, **options)
        return transformers.AutoTokenizer.from_pretrained(folder)

    assert words_module.word_prefix(loaded("llama-bpe")) == " "
    assert words_module.word_prefix(loaded("llama-sp")) == " "  # SentencePiece without a dummy prefix
    assert words_module.word_prefix(loaded("llama-sp", add_prefix_space=True)) == ""  # Llama 2: ▁ on every word
    assert words_module.word_prefix(loaded("gpt2-bpe", add_prefix_space=True)) == ""
    assert words_module.word_prefix(loaded("gpt2-bpe")) == " "  # GPT-2-type tokenizers outside the model-type list


def test_fingerprint_records_the_prefix_deterministically(bpe_models):
    folder = str(bpe_models["llama-bpe"])
    words = load_backbone(folder, device="cpu", words_input=True).tokenizer_fingerprint
    assert load_backbone(folder, device="cpu", words_input=True).tokenizer_fingerprint == words
    assert load_backbone(folder, device="cpu").tokenizer_fingerprint != words  # caches of old, wrong ids differ


def test_guard_refuses_when_the_fix_is_taken_away(bpe_models, conll, tmp_path, monkeypatch):
    for module in (loader, tokenize):  # old code: no prefix anywhere
        monkeypatch.setattr(module, "word_prefix", lambda tokenizer: "")
    result = invoke("extract", bpe_models["llama-bpe"], conll, "--out", tmp_path / "cache")
    assert_refused(result, "TokenizersBackend tokenizer", "joined by spaces", "'Ġ", "text column")
    assert not (tmp_path / "cache" / "train").exists()


def test_guard_refuses_a_tokenizer_whose_pieces_span_words(bpe_models, conll, tmp_path):
    # Trained on whole sentences with spaces kept as ▁, this BPE learns pieces such as "s▁" that
    # cross a word boundary: no prefix can make pre-split words match the sentence.
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    lines = [" ".join(conll_words(r)).lower() for r in range(3)] * 50
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                       show_progress=False))
    folder = tmp_path / "spanning"
    shutil.copytree(bpe_models["llama-bpe"], folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                         eos_token="</s>").save_pretrained(folder)
    assert_refused(invoke("extract", folder, conll, "--out", tmp_path / "cache"),
                   "TokenizersBackend tokenizer splits pre-split words differently", "source row")


def test_check_names_the_first_differing_word(bpe_models):
    tok = transformers.AutoTokenizer.from_pretrained(bpe_models["llama-bpe"])
    words = conll_words(WEST_INDIAN)
    words_module.check_words_as_text(tok, [words], " ")
    with pytest.raises(DatasetError, match=r"source row 7, word 1 'Indian': \[.*\] as a word but \['ĠIndian'\]"):
        words_module.check_words_as_text(tok, [words], "", source_rows=[7])


def test_real_conll_sentences_tokenize_as_text(bpe_models, shared_data, tmp_path):
    """The first CoNLL-2003 validation sentences, all tokens kept (windows), equal their sentences."""
    path = shared_data / "conll2003" / "valid.txt"
    result = lc.extract(str(bpe_models["llama-bpe"]), str(path), tmp_path / "cache", progress=False,
                        limit=60, stride=32)
    cache = lc.LayerCache.open(result.path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(bpe_models["llama-bpe"])
    words_of = load_dataset_records(str(path), limit=60).splits["train"].words
    assert cache.num_examples("train") == 60
    for row, source in enumerate(cache.example_index("train")):
        ids = cache.token_arrays("train", "input_ids", [row])[0]
        word_ids = cache.token_arrays("train", "word_ids", [row])[0]
        sentence = tokenizer(" ".join(words_of[int(source)]), add_special_tokens=False)["input_ids"]
        assert content_ids(ids, word_ids) == sentence
    assert np.all(cache.lengths("train") > 0)


def test_guard_checks_every_example_not_the_first_few(bpe_models, tmp_path, monkeypatch):
    """Issue 26: one-word sentences first (which tokenize alike either way) hid glued words further on."""
    for module in (loader, tokenize):  # a tokenizer whose words lose their space, as before the fix
        monkeypatch.setattr(module, "word_prefix", lambda tokenizer: "")
    singles = [f"{word} O" for word in ("Cricket", "London", "Friday", "Leicestershire", "Somerset", "Simmons",
                                        "Indian", "innings", "runs", "days", "county", "head")]
    glued = "\n".join(line.split()[0] + " O" for line in CONLL.split("\n\n")[3].splitlines())
    path = tmp_path / "singles-first.conll"
    path.write_text("\n\n".join(singles + [glued]) + "\n")
    result = invoke("extract", bpe_models["llama-bpe"], path, "--out", tmp_path / "cache")
    assert_refused(result, "joined by spaces", f"source row {len(singles)}")
