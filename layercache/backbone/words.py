"""Pre-split words as running text: what a tokenizer needs before each word to keep its spaces.

A property of the tokenizer, found once when the backbone is loaded (it enters the tokenizer's
fingerprint) and applied by extraction and the live feed when they encode pre-split words.
"""

from __future__ import annotations

from ..errors import DatasetError

# Words that tell a tokenizer which loses the space before a pre-split word from one that keeps it:
# capitals, a hyphenated word, digits after a space (Llama 3 splits the space off), punctuation.
_PROBE_WORDS = ("The", "West", "Indian", "all-rounder", "took", "4", "wickets", "for", "38", "on", "Friday",
                ",", "officials", "said", ".")



def word_prefix(tokenizer) -> str:
    """What goes before each pre-split word after the first so that it tokenizes as in running text.

    ``""`` where words already come out as in their sentence: WordPiece (BERT), SentencePiece
    tokenizers that prepend ``▁`` to every word (Llama 2, T5, XLM-R), byte-level BPE loaded with
    ``add_prefix_space`` (RoBERTa, GPT-2). ``" "`` where the space is lost: byte-level BPE without
    it (Llama 3, Qwen; ``add_prefix_space`` has no effect on a plain tokenizer.json backend, and
    setting it on a ``ByteLevel`` behind a ``Split`` would put a space before every piece of
    ``all-rounder``) and SentencePiece tokenizers with no dummy prefix (Gemma). A word given as
    ``" took"`` goes through the pre-tokenizer as it would inside the sentence, so it becomes
    ``Ġtook``/``▁took`` and its pieces still carry its word id. Both are tried on fixed words
    rather than read off a list of model types, so any tokenizer gets an answer, always the same
    one; one that neither fits gets ``""`` and is refused by :func:`check_words_as_text`.
    """
    for prefix in ("", " "):
        if _word_mismatch(tokenizer, _PROBE_WORDS, prefix) is None:
            return prefix
    return ""


def with_word_prefix(words, prefix: str) -> list[str]:
    """``words`` as handed to the tokenizer: every word after the first behind ``prefix``."""
    if not prefix:
        return list(words)
    return [words[0], *(prefix + w for w in words[1:])]


def check_words_as_text(tokenizer, examples, prefix: str, source_rows=None, first: int = 0) -> None:
    """Refuse when the tokens of pre-split words are not those of the same words joined by spaces.

    Each of ``examples`` (word lists) is encoded as extraction encodes it (with ``prefix``) and as
    the sentence ``" ".join(words)``, special tokens left out; the ids must be equal, or the states
    cached for every token would come from text the model never reads (``WestIndianall-rounder``).
    Extraction checks every example: a data set whose first sentences are one word each would
    pass any check of the first few. Both encodings are batched (the fast tokenizer's own
    threads), so the check costs about twice the split's own tokenization, a few seconds for all
    of CoNLL-2003 beside minutes of forward passes (figures in the commit that made it check every
    example). ``first`` is the position of ``examples[0]`` in ``source_rows``.
    """
    examples = [[str(w) for w in words] for words in examples]
    if not examples:
        return
    alone = tokenizer([with_word_prefix(words, prefix) for words in examples], is_split_into_words=True,
                      add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
    joined = tokenizer([" ".join(words) for words in examples], add_special_tokens=False, truncation=False,
                       verbose=False)["input_ids"]
    for i, words in enumerate(examples):
        if alone[i] == joined[i]:
            continue
        mismatch = _word_mismatch(tokenizer, words, prefix)  # where they differ, for the message
        if mismatch is None:
            continue
        w, alone_pieces, in_text = mismatch
        row = source_rows[first + i] if source_rows is not None else first + i
        raise DatasetError(
            f"The {type(tokenizer).__name__} tokenizer splits pre-split words differently from the same words "
            f"joined by spaces (source row {row}, word {w} {words[w]!r}: {alone_pieces} as a word but {in_text} in "
            "the sentence), so the cached states would not be those of the text; use a tokenizer that splits "
            "text on spaces before its sub-word model, or give the sentences as a text column instead of words.")


def _word_mismatch(tokenizer, words, prefix: str) -> tuple[int, list[str], list[str]] | None:
    """``None`` when ``words`` tokenize as their sentence; else (word index, its pieces alone, in the text)."""
    words = [str(w) for w in words]
    # No truncation: the whole example is compared; verbose=False silences the over-length warning.
    alone = tokenizer(with_word_prefix(words, prefix), is_split_into_words=True, add_special_tokens=False,
                      truncation=False, verbose=False)
    text = tokenizer(" ".join(words), add_special_tokens=False, truncation=False, return_offsets_mapping=True,
                     verbose=False)
    if alone["input_ids"] == text["input_ids"]:
        return None
    alone_words = alone.word_ids()
    start = 0
    for w, word in enumerate(words):
        # A piece belongs to word w in the sentence when it overlaps the word or the space before it
        # (byte-level BPE may give that space a piece of its own, as Llama 3 does before digits).
        lo, hi = start - (1 if w else 0), start + len(word)
        ids_alone = [t for t, k in zip(alone["input_ids"], alone_words) if k == w]
        ids_text = [t for t, (a, b) in zip(text["input_ids"], text["offset_mapping"]) if a < hi and b > lo]
        if ids_alone != ids_text:
            return w, tokenizer.convert_ids_to_tokens(ids_alone), tokenizer.convert_ids_to_tokens(ids_text)
        start = hi + 1
    # Every word matches piece by piece, yet the sequences differ (a piece across two words): show the first.
    first = next((k for k, (a, b) in enumerate(zip(alone["input_ids"], text["input_ids"])) if a != b),
                 min(len(alone["input_ids"]), len(text["input_ids"])))
    w = next((k for k in alone_words[first:] if k is not None), len(words) - 1)
    return w, tokenizer.convert_ids_to_tokens(alone["input_ids"][first:first + 3]), \
        tokenizer.convert_ids_to_tokens(text["input_ids"][first:first + 3])
