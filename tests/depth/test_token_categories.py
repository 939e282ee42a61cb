"""Token categories on a hand-checked CoNLL cache, and per-token values summarised by category.

The tiny BERT here has its own WordPiece vocabulary (specials, letters, a few words, punctuation),
so every sub-token below is known by hand: ``zqx`` is not in it and splits into ``z ##q ##x``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

import layercache as lc
from layercache.depth import depth_by_category, is_punctuation, token_categories
from layercache.errors import CacheError, ConfigError

WORDS = ["the", "cat", "sat", "on", "mat", "dog"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

TRAIN = """-DOCSTART- -X- -X- O

The DT B-NP O
cat NN I-NP O
sat VBD B-VP O
on IN B-PP O
Zqx NNP B-NP B-PER
. . O O

cat NN B-NP O
sat VBD B-VP O
, , O O
"""
VALID = """dog NN B-NP O
sat VBD B-VP O
! . O O
"""

# Cache order is longest first: row 0 is the first sentence (10 tokens), row 1 the second (5).
TOKENS = ["[CLS]", "the", "cat", "sat", "on", "z", "##q", "##x", ".", "[SEP]", "[CLS]", "cat", "sat", ",", "[SEP]"]
TOKEN_TYPE = ["special", "word", "word", "word", "word", "word", "word", "word", "punctuation", "special",
              "special", "word", "word", "punctuation", "special"]
POSITION = [None, "word-initial", "word-initial", "word-initial", "word-initial", "word-initial", "continuation",
            "continuation", "word-initial", None, None, "word-initial", "word-initial", "word-initial", None]
POS = [None, "DT", "NN", "VBD", "IN", "NNP", "NNP", "NNP", ".", None, None, "NN", "VBD", ",", None]
NER = [None, "O", "O", "O", "O", "B-PER", "B-PER", "B-PER", "O", None, None, "O", "O", "O", None]
# Train counts of the non-special pieces: cat 2, sat 2, every other piece 1 -> two bins, ties merged.
FREQUENCY = [None, "1", "2", "2", "1", "1", "1", "1", "1", None, None, "2", "2", "1", None]


def make_bert(folder: Path) -> Path:
    vocab = {t: i for i, t in enumerate(SPECIALS + LETTERS + ["##" + c for c in LETTERS] + WORDS + list(".,!"))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=32).save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def conll_cache(tmp_path_factory) -> lc.LayerCache:
    root = tmp_path_factory.mktemp("categories")
    (root / "train.conll").write_text(TRAIN)
    (root / "valid.conll").write_text(VALID)
    model = make_bert(root / "bert")
    result = lc.extract(str(model), None, root / "cache", split_files={"train": str(root / "train.conll"),
                                                                       "validation": str(root / "valid.conll")},
                        progress=False)
    return lc.LayerCache.open(result.path)


def names(family) -> list[str | None]:
    return [family.categories[c] if c >= 0 else None for c in family.codes]


def test_every_token_labelled_by_hand(conll_cache):
    vocabulary = conll_cache.vocabulary()
    ids = np.concatenate(conll_cache.token_arrays("train", "input_ids", [0, 1]))
    assert [vocabulary.tokens[i] for i in ids] == TOKENS  # the tokenization the expectations assume

    categories = token_categories(conll_cache, "train")
    assert categories.n_tokens == len(TOKENS) and categories.frequency_split == "train"
    assert list(categories.families) == ["token_type", "word_position", "frequency", "pos", "chunk", "ner"]
    assert names(categories["token_type"]) == TOKEN_TYPE
    assert names(categories["word_position"]) == POSITION
    assert names(categories["pos"]) == POS
    assert names(categories["ner"]) == NER
    assert names(categories["frequency"]) == FREQUENCY
    assert categories["frequency"].categories == ("1", "2")
    np.testing.assert_array_equal(categories["token_type"].counts, [4, 2, 9])
    continuation = np.array(POSITION) == "continuation"
    np.testing.assert_array_equal(categories["word_position"].mask("continuation"), continuation)


def test_frequency_bins_come_from_the_training_split(conll_cache):
    categories = token_categories(conll_cache, "validation")
    # [CLS] dog sat ! [SEP]: "dog" and "!" never occur in train (0), "sat" twice
    assert names(categories["frequency"]) == [None, "0", "2", "0", None]
    assert names(categories["token_type"]) == ["special", "word", "word", "punctuation", "special"]
    own = token_categories(conll_cache, "validation", frequency_split="validation", frequency_bins=3)
    assert names(own["frequency"]) == [None, "1", "1", "1", None]


def test_depth_by_category_by_hand(conll_cache):
    categories = token_categories(conll_cache, "train")
    values = np.arange(len(TOKENS), dtype=np.float64)  # value i at token i
    values[3] = np.nan  # "sat" has no value: left out everywhere
    result = depth_by_category(values, categories)
    token_type = result["token_type"]
    np.testing.assert_array_equal(token_type.count, [4, 2, 8])
    np.testing.assert_allclose(token_type.mean, [(0 + 9 + 10 + 14) / 4, (8 + 13) / 2,
                                                 (1 + 2 + 4 + 5 + 6 + 7 + 11 + 12) / 8])
    np.testing.assert_allclose(token_type.std[1], 2.5)  # population std of 8 and 13
    position = result["word_position"]
    np.testing.assert_array_equal(position.count, [8, 2])
    np.testing.assert_allclose(position.mean, [(1 + 2 + 4 + 5 + 8 + 11 + 12 + 13) / 8, 6.5])
    np.testing.assert_allclose(position.std[1], 0.5)
    pos = result["pos"]
    at = pos.categories.index("NNP")
    assert pos.count[at] == 3 and pos.mean[at] == 6.0
    empty = pos.categories.index("VBD")  # "sat" twice: one NaN, one value 12
    assert pos.count[empty] == 1 and pos.mean[empty] == 12.0 and pos.std[empty] == 0.0
    assert result.count == len(TOKENS) - 1 and result.mean == pytest.approx(np.nanmean(values))
    np.testing.assert_allclose([token_type.p10[k] for k in range(3)],
                               [np.percentile(v, 10) for v in ([0, 9, 10, 14], [8, 13], [1, 2, 4, 5, 6, 7, 11, 12])])
    np.testing.assert_allclose([token_type.p90[k] for k in range(3)],
                               [np.percentile(v, 90) for v in ([0, 9, 10, 14], [8, 13], [1, 2, 4, 5, 6, 7, 11, 12])])
    assert {"family": "token_type", "category": "punctuation", "count": 2, "mean": 10.5, "std": 2.5,
            "p10": 8.5, "p90": 12.5} in result.rows()

    # One array per cache row gives the same; a category with no token has NaN statistics.
    split = depth_by_category([values[:10], values[10:]], categories)
    np.testing.assert_array_equal(split["pos"].count, pos.count)
    only = np.full(len(TOKENS), np.nan)
    only[1] = 1.0
    sparse = depth_by_category(only, categories)["token_type"]
    assert sparse.count.tolist() == [0, 0, 1] and np.isnan(sparse.mean[0]) and np.isnan(sparse.std[1])
    assert np.isnan(sparse.p10[0]) and np.isnan(sparse.p90[1]) and sparse.p10[2] == sparse.p90[2] == 1.0


def test_refusals(conll_cache, tiny_models, tsv, tmp_path):
    categories = token_categories(conll_cache, "train")
    with pytest.raises(ConfigError, match="one number per token row"):
        depth_by_category(np.zeros(3), categories)
    with pytest.raises(ConfigError, match="infinity"):
        depth_by_category(np.full(len(TOKENS), np.inf), categories)
    with pytest.raises(ConfigError, match="no category family 'lemma'"):
        categories["lemma"]
    with pytest.raises(ConfigError, match="no category 'noun'"):
        categories["token_type"].mask("noun")
    with pytest.raises(ConfigError, match="frequency_bins"):
        token_categories(conll_cache, "train", frequency_bins=0)
    with pytest.raises(ConfigError, match="no split 'test'"):
        token_categories(conll_cache, "test")
    pooled = lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "pooled", store="pooled", progress=False)
    with pytest.raises(CacheError, match="pooled vectors only"):
        token_categories(lc.LayerCache.open(pooled.path))


def test_text_input_without_token_tasks(tiny_models, tsv, tmp_path):
    cache = lc.LayerCache.open(lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "c", progress=False).path)
    categories = token_categories(cache, "train", frequency_bins=4)
    assert list(categories.families) == ["token_type", "word_position", "frequency"]  # word ids come from the text
    assert categories.n_tokens == int(cache.lengths("train").sum())
    assert categories["frequency"].counts.sum() == categories["token_type"].counts[1:].sum()


def test_is_punctuation():
    assert all(is_punctuation(t) for t in (".", ",", "...", "—", "«", "$", "'"))
    assert not any(is_punctuation(t) for t in ("", "a", "1", "a.", " ", "▁"))
