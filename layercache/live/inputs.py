"""What a live bundle reads: texts or pre-split words, from arguments or a file, checked and tokenized.

Inputs are tokenized by extraction's own :func:`~layercache.extraction.tokenize.encode_split`, so
a text is cut, windowed with the stride and given word ids exactly as a cache of it would be. When
any head labels words, every input goes in as words: a text is split on whitespace (as a word list
is read from a data file) and the words are tokenized as they appear in running text; a word list
given where texts are expected is joined by single spaces.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..core.option_names import option
from ..errors import ConfigError, DatasetError
from ..extraction.tokenize import EncodedExample, encode_split
from ..sources.records import SplitRecords

Input = str | Sequence[str]
"""One input: a text, or a list of pre-split words."""


def as_records(inputs: Sequence[Input], words: bool) -> SplitRecords:
    """``inputs`` as one split of records: word lists when ``words``, else texts. An empty input is refused."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if len(inputs) == 0:
        raise ConfigError("Nothing to predict: give at least one text (or a file with one text per line).")
    items = []
    for i, x in enumerate(inputs):
        pieces = x.split() if isinstance(x, str) else [str(w) for w in x]
        if not pieces:
            raise ConfigError(f"Input {i + 1} is empty; give every input some text, or leave it out.")
        items.append(pieces if words else (x if isinstance(x, str) else " ".join(pieces)))
    return SplitRecords(words=items) if words else SplitRecords(texts=items)


def encode_inputs(tokenizer, records: SplitRecords, *, max_length: int, stride: int | None,
                  causal: bool) -> list[EncodedExample]:
    """Every input tokenized (and windowed with ``stride``) as extraction tokenizes a split."""
    try:
        return list(encode_split(tokenizer, records, max_length=max_length, stride=stride, causal=causal))
    except DatasetError as err:  # extraction's sentence speaks of splits and source rows
        raise ConfigError(str(err).replace("of the split ", "").replace("source row", "input")) from None


def read_inputs(path: str | Path, text_field: str = "text") -> list[str]:
    """The texts of ``path``: one per line, or the ``text_field`` of each object of a ``.jsonl`` file.

    Blank lines are skipped; a missing file, a line of a ``.jsonl`` file that is not an object with
    that field, or a file with no text is refused in one sentence.
    """
    return [text for text, _ in read_input_lines(path, text_field)]


def read_input_lines(path: str | Path, text_field: str = "text") -> list[tuple[Input, dict]]:
    """Each input of ``path`` (see :func:`read_inputs`) with the object its line holds: every field of a ``.jsonl``
    line (``id`` and the rest), ``{}`` for a line of plain text."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"The input file {path} does not exist; give a file with one text per line (or .jsonl).")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"The input file {path} cannot be read ({err}); give a UTF-8 text file.") from None
    inputs: list[tuple[Input, dict]] = []
    jsonl = path.suffix.lower() == ".jsonl"
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            inputs.append((line, {}))
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ConfigError(f"Line {number} of {path} is not JSON; give one JSON object per line.") from None
        if not isinstance(row, dict) or not isinstance(row.get(text_field), (str, list)):
            raise ConfigError(f"Line {number} of {path} has no text field {text_field!r}; name the field with "
                              f"{option('text_field')}.")
        inputs.append((row[text_field], row))
    if not inputs:
        raise ConfigError(f"The input file {path} holds no text; give one text per line.")
    return inputs
