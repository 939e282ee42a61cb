"""Tiny random backbones built from configs, saved to folders like real Hugging Face models.

They share one small WordPiece tokenizer over the built-in grammar's vocabulary. Some words are
left out of the vocabulary on purpose, so they split into several sub-tokens and the
first-sub-token label alignment is exercised.
"""

from __future__ import annotations

from pathlib import Path

import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from layercache.sources.builtin import builtin_vocabulary

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


KINDS = ("bert", "roberta", "deberta", "mpnet", "gpt2", "llama", "t5", "bart")
ENCODERS = ("bert", "roberta", "deberta", "mpnet", "t5", "bart")
"""Kinds whose tokenizer wraps a text in [CLS] ... [SEP] (encoders and encoder-decoders)."""


def make_model(folder: Path, kind: str, seed: int = 0) -> Path:
    """Write a random ``kind`` model plus tokenizer to ``folder`` and return it."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(folder, encoder=kind in ENCODERS)
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(_config(kind, len(tok)))
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params < MAX_PARAMETERS, f"tiny {kind} has {n_params} parameters"
    model.save_pretrained(folder)
    return folder
