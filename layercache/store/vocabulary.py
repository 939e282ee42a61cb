"""The tokenizer's vocabulary in the cache (``vocab.json``): every id's token string, without loading a tokenizer.

Per-token analyses need to know what each cached ``input_ids`` entry was: a special token, a piece
of punctuation, the start of a word. The cache's readers never load a tokenizer (they import no
``transformers``), so extraction writes the table beside the shards::

    {"format": 1,
     "tokenizer_fingerprint": "sha256:...",        the manifest's tokenizer.fingerprint
     "tokens": ["[PAD]", ..., "##ing", ...],       id -> the tokenizer's own piece (null: no token)
     "special_ids": [0, 100, 101, 102, 103],
     "markers": {"word_start": null, "continuation": "##", "word_end": null,
                 "byte_level": false, "byte_fallback": false}}

The tokens are the tokenizer's pieces as ``convert_ids_to_tokens`` gives them, markers included
(``Ġ``/``▁`` before a word, ``##`` on a continuation), since those markers are what tell a
word-initial piece from the inside of a word. ``markers`` says which ones this tokenizer uses (read
from its decoder), so :meth:`Vocabulary.surface` can give the text a piece stands for. The file is
written atomically, its checksum recorded in ``manifest.side_files``, and checked on every read.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.checksum import data_checksum
from ..core.confine import OwnedFolder
from ..core.files import write_text_atomic
from ..errors import CacheError
from .manifest import Manifest, SideFile
from .schema import SIDE_FILES
from .side_checks import SideFileCheck

VOCABULARY_NAME = SIDE_FILES["vocabulary"]
VOCABULARY_FORMAT = 1
"""Bumped when a reader of the previous version would misread a new ``vocab.json``."""


@dataclass(frozen=True)
class WordMarkers:
    """How a tokenizer marks word boundaries inside its pieces (read from its decoder at extraction)."""

    word_start: str | None = None
    """Character standing for the space before a word (SentencePiece ``▁``); byte-level BPE's ``Ġ`` is a byte."""
    continuation: str | None = None
    """Prefix of a piece that continues a word (WordPiece ``##``)."""
    word_end: str | None = None
    """Suffix of a piece that ends a word (``</w>`` in some BPE vocabularies)."""
    byte_level: bool = False
    """Pieces are written in GPT-2's byte alphabet (``Ġ`` is the space byte, ``Ċ`` a newline)."""
    byte_fallback: bool = False
    """Pieces such as ``<0x2C>`` stand for one raw byte."""

    def to_json(self) -> dict[str, Any]:
        """The markers as ``vocab.json`` stores them."""
        return {"word_start": self.word_start, "continuation": self.continuation, "word_end": self.word_end,
                "byte_level": self.byte_level, "byte_fallback": self.byte_fallback}


@dataclass(frozen=True)
class Vocabulary:
    """A cache's tokenizer vocabulary: id -> token string, and the special-token ids.

    Read with :meth:`layercache.store.reader.LayerCache.vocabulary`.
    """

    tokens: tuple[str | None, ...]
    """(V,) the tokenizer's own piece for each id (``convert_ids_to_tokens``), ``None`` for an id with none."""
    special_ids: frozenset[int]
    """Ids of the tokenizer's special tokens (``[CLS]``, ``<s>``, ``<|begin_of_text|>`` ...)."""
    markers: WordMarkers
    tokenizer_fingerprint: str
    """The tokenizer this table came from (the manifest's ``tokenizer.fingerprint``)."""

    def __len__(self) -> int:
        return len(self.tokens)

    def special_mask(self) -> np.ndarray:
        """(V,) bool, True at special-token ids."""
        mask = np.zeros(len(self.tokens), dtype=bool)  # (V,)
        mask[list(self.special_ids)] = True
        return mask

    def surface(self, token_id: int) -> str:
        """The text piece ``token_id`` stands for, word markers removed and surrounding spaces stripped.

        ``Ġ,`` and ``▁,`` give ``,``; ``##ing`` gives ``ing``; a piece that is only a marker (``##``,
        ``▁``) keeps its characters, since it is then a string of its own. ``""`` for an id with no token.
        """
        return self.surfaces[token_id]

    @functools.cached_property
    def surfaces(self) -> tuple[str, ...]:
        """(V,) :meth:`surface` of every id, computed once."""
        return tuple(_surface(token, self.markers) for token in self.tokens)


def _surface(token: str | None, markers: WordMarkers) -> str:
    if token is None:
        return ""
    text = token
    if markers.byte_fallback and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            text = bytes([int(text[3:5], 16)]).decode("utf-8", errors="replace")
        except ValueError:
            pass
    if markers.byte_level:
        # Characters outside the byte alphabet (added tokens such as <|endoftext|>) are kept as they are.
        alphabet = _byte_alphabet()
        if all(c in alphabet for c in text):
            text = bytes(alphabet[c] for c in text).decode("utf-8", errors="replace")
    if markers.word_start and text != markers.word_start:
        text = text.replace(markers.word_start, " ")
    if markers.continuation and text.startswith(markers.continuation) and len(text) > len(markers.continuation):
        text = text[len(markers.continuation):]
    if markers.word_end and text.endswith(markers.word_end) and len(text) > len(markers.word_end):
        text = text[:-len(markers.word_end)]
    stripped = text.strip()
    return stripped if stripped else text


@functools.lru_cache(maxsize=1)
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte alphabet reversed: the printable character standing for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shifted)
            shifted += 1
    return {chr(c): b for b, c in zip(printable, chars)}


# --- the file ---------------------------------------------------------------------------------
def write_vocabulary(cache_dir: str | os.PathLike, vocabulary: Vocabulary) -> SideFile:
    """Write ``vocab.json`` atomically; returns its manifest entry (size and checksum of the bytes written)."""
    payload = {"format": VOCABULARY_FORMAT, "tokenizer_fingerprint": vocabulary.tokenizer_fingerprint,
               "tokens": list(vocabulary.tokens), "special_ids": sorted(vocabulary.special_ids),
               "markers": vocabulary.markers.to_json()}
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    data = text.encode("utf-8")
    write_text_atomic(OwnedFolder.at(cache_dir).file(VOCABULARY_NAME), text)  # never through a link
    return SideFile(file=VOCABULARY_NAME, bytes=len(data), checksum=data_checksum(data))


def read_vocabulary(cache_dir: str | os.PathLike, manifest: Manifest) -> Vocabulary:
    """Read and check ``vocab.json``: present in the manifest, unchanged since extraction, of this tokenizer.

    Raises :class:`CacheError` naming what is wrong and the fix: the cache predates the file, the
    file is missing or changed, or it describes another tokenizer.
    """
    entry = manifest.side_files.get("vocabulary")
    side = SideFileCheck.at(cache_dir, VOCABULARY_NAME, "a vocabulary",
                            "run the same `layercache extract` command again to write it (no states are recomputed)")
    if entry is None:
        raise CacheError(f"The cache {cache_dir} has no tokenizer vocabulary (it was written before layercache "
                         f"saved {VOCABULARY_NAME}); {side.fix}.")
    data = side.recorded_bytes(entry)  # a small file: read once, the bytes checked are the bytes parsed
    vocabulary = side.load(lambda: _parse(json.loads(data)), (ValueError, TypeError, KeyError, RecursionError))
    if vocabulary.tokenizer_fingerprint != manifest.tokenizer.fingerprint:
        raise side.refusal("describes another tokenizer than the manifest's")
    return vocabulary


def _parse(data: Any) -> Vocabulary:
    """A :class:`Vocabulary` from parsed ``vocab.json``; ``ValueError`` naming the first bad field."""
    if not isinstance(data, dict) or data.get("format") != VOCABULARY_FORMAT:
        raise ValueError(f"format should be {VOCABULARY_FORMAT}")
    tokens = data["tokens"]
    if not isinstance(tokens, list) or not all(t is None or isinstance(t, str) for t in tokens):
        raise ValueError("tokens should be a list of strings or nulls")
    special = data["special_ids"]
    if not isinstance(special, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(tokens)
                                                for i in special):
        raise ValueError(f"special_ids should be ids below {len(tokens)}")
    fingerprint = data["tokenizer_fingerprint"]
    if not isinstance(fingerprint, str):
        raise ValueError("tokenizer_fingerprint should be a string")
    raw = data["markers"]
    if not isinstance(raw, dict):
        raise ValueError("markers should be an object")
    markers = {}
    for name in ("word_start", "continuation", "word_end"):
        value = raw.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"markers.{name} should be a non-empty string or null")
        markers[name] = value
    for name in ("byte_level", "byte_fallback"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise ValueError(f"markers.{name} should be true or false")
        markers[name] = value
    return Vocabulary(tokens=tuple(tokens), special_ids=frozenset(special), markers=WordMarkers(**markers),
                      tokenizer_fingerprint=fingerprint)
