"""Weak-signal probing tasks built from text in ``../shared/data``: SentEval's bigram shift (BShift).

BShift (Conneau et al. 2018, "What you can cram into a single vector"): a sentence with two adjacent words
swapped, or the sentence as written; the probe says which. Nothing about the topic or the sentiment tells
them apart, only word order, a property that lives in small-variance directions of a model's states: a
storage choice that keeps the directions of largest variance (PCA) can lose it while a topic task keeps
its accuracy.

Built here from SST-2's sentences (``bshift``: train from SST-2's train file, test from its dev file) and
AG News's first sentences (``bshift-agnews``), deterministically (seeded): half the sentences of each
split get one swap, at a random position between two word tokens (never punctuation, never two equal
words), as SentEval's BShift does on BookCorpus; sentences under 5 or over 40 words are left out.

    python benchmarks/weak_signal.py --out /tmp/weak    # writes /tmp/weak/bshift/{train,test}.tsv, ...

Each file is ``label<TAB>text`` with no header (1 = shifted), the format of the SST-2 files, so the tasks
extract like any other: ``layercache extract minilm --split train=.../train.tsv --split test=.../test.tsv``.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_DATA  # noqa: E402

MIN_WORDS, MAX_WORDS = 5, 40
SEED = 0
_WORD = re.compile(r"^[\w'-]*\w[\w'-]*$")
"""A token that may be swapped: letters, digits, apostrophes and hyphens only (AG News is not tokenised: a word
with a comma or a full stop attached would mark the swap by where its punctuation lands)."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def bigram_shift(words: list[str], rng: random.Random) -> list[str] | None:
    """``words`` with two adjacent word tokens swapped at a random position, or None when no pair can be swapped
    (a pair of punctuation, or of two equal words, would give the same or a trivially marked sentence)."""
    pairs = [i for i in range(len(words) - 1)
             if _WORD.match(words[i]) and _WORD.match(words[i + 1]) and words[i] != words[i + 1]]
    if not pairs:
        return None
    i = rng.choice(pairs)
    return [*words[:i], words[i + 1], words[i], *words[i + 2:]]


def bshift_rows(sentences: list[str], seed: int = SEED) -> list[tuple[int, str]]:
    """(label, text) per usable sentence, in a seeded order: half shifted (label 1), half as written (0)."""
    rng = random.Random(seed)
    usable = [s.split() for s in sentences if MIN_WORDS <= len(s.split()) <= MAX_WORDS]
    rng.shuffle(usable)
    rows = []
    for n, words in enumerate(usable):
        if n % 2:
            shifted = bigram_shift(words, rng)
            if shifted is not None:
                rows.append((1, " ".join(shifted)))
        else:
            rows.append((0, " ".join(words)))
    return rows


def _sst2(path: Path) -> list[str]:
    return [line.split("\t", 1)[1].strip() for line in path.read_text().splitlines() if "\t" in line]


def _agnews(path: Path) -> list[str]:
    """Each text's first sentence (AG News texts are a headline-like first sentence and more)."""
    texts = [line.rsplit("\t", 1)[0] for line in path.read_text().splitlines() if "\t" in line]
    return [_SENTENCE_END.split(t.replace("#39;", "'").replace("\\", " ").strip(), 1)[0] for t in texts]


TASKS = {  # name -> {split: (reader, file under ../shared/data)}
    "bshift": {"train": (_sst2, "sst2/train.tsv"), "test": (_sst2, "sst2/dev.tsv")},
    "bshift-agnews": {"train": (_agnews, "agnews/dev.tsv"), "test": (_agnews, "agnews/test.tsv")},
}


def write_task(name: str, out: Path, data: Path = DEFAULT_DATA, seed: int = SEED) -> dict[str, Path]:
    """Write task ``name``'s splits under ``out/name/`` (reused when already there); split -> file."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for offset, (split, (reader, source)) in enumerate(TASKS[name].items()):
        path = folder / f"{split}.tsv"
        if not path.is_file():
            rows = bshift_rows(reader(data / source), seed + offset)
            path.write_text("".join(f"{label}\t{text}\n" for label, text in rows))
        files[split] = path
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/weak"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    args = parser.parse_args(argv)
    for name in args.tasks:
        for split, path in write_task(name, args.out, args.data).items():
            labels = [line.split("\t", 1)[0] for line in path.read_text().splitlines()]
            print(f"{name} {split}: {len(labels):,} sentences, {labels.count('1'):,} shifted -> {path}")


if __name__ == "__main__":
    main()
