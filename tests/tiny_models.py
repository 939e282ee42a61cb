"""Tiny random backbones built from configs, saved to folders like real Hugging Face models.

They share one small WordPiece tokenizer over the built-in grammar's vocabulary. Some words are
left out of the vocabulary on purpose, so they split into several sub-tokens and the
first-sub-token label alignment is exercised.

The ``*-bpe`` and ``*-sp`` kinds carry real sub-word tokenizers instead, trained here with the
``tokenizers`` library and saved the way their hub models are, because what goes wrong with
pre-split words depends on how a tokenizer marks a word's leading space:

- ``llama-bpe``: Llama 3's byte-level BPE (regex ``Split`` then ``ByteLevel`` without prefix space,
  a plain tokenizer.json backend, ``<|begin_of_text|>`` prepended);
- ``gpt2-bpe``: GPT-2's byte-level BPE as a ``GPT2Tokenizer`` (which ``add_prefix_space`` rebuilds);
- ``llama-sp``: SentencePiece-style BPE marking spaces with ``▁``, as a ``LlamaTokenizer`` saved with
  ``add_prefix_space=False`` (no dummy prefix, as Gemma and some Llama 2 derivatives).
"""

from __future__ import annotations

import json
from pathlib import Path

import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from layercache.sources.builtin import builtin_vocabulary, load_builtin

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
MAX_POSITIONS = 64
HIDDEN = 32
MAX_PARAMETERS = 150_000  # "tiny" is asserted, not assumed


def _vocab() -> dict[str, int]:
    # Every fourth word is left out so it is spelled with sub-word pieces.
    words = [w for i, w in enumerate(builtin_vocabulary()) if i % 4 != 0]
    pieces = SPECIALS + LETTERS + ["##" + c for c in LETTERS] + [str(d) for d in range(10)] + \
        [".", ",", "!", "?", "'", "-"] + words
    return {tok: i for i, tok in enumerate(dict.fromkeys(pieces))}


def make_tokenizer(folder: Path, *, encoder: bool = True) -> transformers.PreTrainedTokenizerFast:
    """A fast WordPiece tokenizer; encoders add [CLS] ... [SEP], decoders add nothing and have no pad."""
    tok = Tokenizer(models.WordPiece(_vocab(), unk_token="[UNK]", max_input_chars_per_word=50))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    vocab = tok.get_vocab()
    if encoder:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
            mask_token="[MASK]", model_max_length=MAX_POSITIONS)
    else:
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok, unk_token="[UNK]", eos_token="[SEP]", bos_token="[CLS]",
            model_max_length=MAX_POSITIONS)
    fast.save_pretrained(folder)
    return fast


def _config(kind: str, vocab_size: int):
    common = dict(vocab_size=vocab_size)
    if kind == "bert":
        return transformers.BertConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=64, max_position_embeddings=MAX_POSITIONS, **common)
    if kind == "roberta":
        return transformers.RobertaConfig(hidden_size=HIDDEN, num_hidden_layers=3, num_attention_heads=4,
                                          intermediate_size=64, max_position_embeddings=MAX_POSITIONS + 2,
                                          pad_token_id=0, **common)
    if kind == "gpt2":
        return transformers.GPT2Config(n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=MAX_POSITIONS,
                                       bos_token_id=2, eos_token_id=3, **common)
    if kind == "llama":
        return transformers.LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=3, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64,
                                        max_position_embeddings=MAX_POSITIONS, bos_token_id=2, eos_token_id=3,
                                        pad_token_id=None, **common)
    if kind == "t5":
        return transformers.T5Config(d_model=HIDDEN, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     decoder_start_token_id=0, pad_token_id=0, eos_token_id=3, **common)
    if kind == "deberta":
        return transformers.DebertaV2Config(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, max_position_embeddings=MAX_POSITIONS,
                                            pad_token_id=0, **common)
    if kind == "mpnet":
        return transformers.MPNetConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=MAX_POSITIONS + 2,
                                        pad_token_id=0, **common)
    if kind == "bart":
        return transformers.BartConfig(d_model=HIDDEN, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                                       decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                       max_position_embeddings=MAX_POSITIONS, pad_token_id=0, bos_token_id=2,
                                       eos_token_id=3, decoder_start_token_id=3, **common)
    raise ValueError(kind)


BPE_KINDS = ("llama-bpe", "gpt2-bpe", "llama-sp")
"""Kinds with a trained sub-word tokenizer (see the module docstring); built by :func:`make_model` too."""
KINDS = ("bert", "roberta", "deberta", "mpnet", "gpt2", "llama", "t5", "bart")
ENCODERS = ("bert", "roberta", "deberta", "mpnet", "t5", "bart")
"""Kinds whose tokenizer wraps a text in [CLS] ... [SEP] (encoders and encoder-decoders)."""


def make_model(folder: Path, kind: str, seed: int = 0) -> Path:
    """Write a random ``kind`` model plus tokenizer to ``folder`` and return it."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    if kind in BPE_KINDS:
        tok = make_subword_tokenizer(folder, kind)
        config = _subword_config(kind, tok)
    else:
        tok = make_tokenizer(folder, encoder=kind in ENCODERS)
        config = _config(kind, len(tok))
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(config)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params < MAX_PARAMETERS, f"tiny {kind} has {n_params} parameters"
    model.save_pretrained(folder)
    return folder


def pickle_only_copy(source: Path, folder: Path) -> Path:
    """``source`` copied to ``folder`` with its weights as pytorch_model.bin only (save_pretrained writes
    safetensors), the kind of model ``--allow-pickle`` is for."""
    import shutil

    import torch
    from safetensors.torch import load_file

    shutil.copytree(source, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return folder


def huge_llama(llama: Path, folder: Path) -> Path:
    """The tiny Llama at ``llama`` with its input embeddings times 1e7, saved to ``folder``: its states go far
    beyond the float16 range before its final norm (finite in float32)."""
    import torch

    model = transformers.AutoModel.from_pretrained(llama)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(1e7)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(llama).save_pretrained(folder)
    return folder


# --- trained sub-word tokenizers ------------------------------------------------------------------
# Llama 3's pre-tokenizer regex: a word keeps the space before it, digits go in threes without one.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SUBWORD_VOCAB = 700
SUBWORD_POSITIONS = 128
# Capitalised news-style sentences beside the built-in grammar's lower-case ones, so the merges
# include pieces such as "Ġtook" and "▁Friday" that CoNLL-style test data uses.
NEWS_LINES = (
    "West Indian all-rounder Phil Simmons took four for 38 on Friday as Leicestershire beat Somerset .",
    "The European Commission said on Thursday it disagreed with German advice to consumers .",
    "Germany 's representative to the European Union 's veterinary committee said on Wednesday .",
    "Peter Blackburn took the train to Brussels and London on Monday , officials said .",
    "Simmons took 4 wickets for 38 runs , and the county took the lead in the championship .",
    "Results of English county championship cricket matches on Friday : Somerset v Leicestershire .",
    "He said the Indian team would play two days in West London and four in Brussels .",
)


def _subword_corpus() -> list[str]:
    sentences = [" ".join(words) for words in load_builtin(sizes={"train": 400}).splits["train"].words]
    return sentences + list(NEWS_LINES) * 20


def _trained_bpe(pre_tokenizer, specials: list[str], alphabet: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=SUBWORD_VOCAB, special_tokens=specials, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(_subword_corpus(), trainer)
    return tok


def _vocab_and_merges(tok: Tokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def make_subword_tokenizer(folder: Path, kind: str, **options) -> transformers.PreTrainedTokenizerBase:
    """Train and save the tokenizer of a ``BPE_KINDS`` kind; ``options`` go to its transformers class."""
    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    if kind == "llama-bpe":
        bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
        tok = _trained_bpe(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), [bos, eos], byte_alphabet)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                          special_tokens=[(bos, tok.token_to_id(bos))])])
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos,
                                                    model_max_length=SUBWORD_POSITIONS, **options)
    elif kind == "gpt2-bpe":
        tok = _trained_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"], byte_alphabet)
        vocab, merges = _vocab_and_merges(tok)
        fast = transformers.GPT2Tokenizer(vocab=vocab, merges=merges, model_max_length=SUBWORD_POSITIONS,
                                          **options)
    elif kind == "llama-sp":
        # Trained on words split at spaces, as SentencePiece does, so no piece spans two words.
        tok = _trained_bpe(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True),
                           ["<unk>", "<s>", "</s>"], [chr(c) for c in range(32, 127)] + ["▁"])
        vocab, merges = _vocab_and_merges(tok)
        fast = transformers.LlamaTokenizer(vocab=vocab, merges=merges, model_max_length=SUBWORD_POSITIONS,
                                           **{"add_prefix_space": False, **options})
    else:
        raise ValueError(kind)
    fast.save_pretrained(folder)
    return fast


def _subword_config(kind: str, tok):
    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if kind == "gpt2-bpe":
        return transformers.GPT2Config(n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=SUBWORD_POSITIONS, **ids)
    return transformers.LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=64,
                                    max_position_embeddings=SUBWORD_POSITIONS, pad_token_id=None, **ids)
