"""The built-in task set: generated sentences that carry four labels at once.

A seeded grammar with its own vocabulary (about 1,300 word types) writes sentences such as::

    the swiss cheese under the basement that the managers kept is not smelly but it is awkward
    no golden jumpers seem slightly excellent

and labels every sentence for four tasks, so that one cache of hidden states serves all of them.
Each task needs a different kind of knowledge, so probing every layer shows where a model builds
each kind: on all-MiniLM-L6-v2, linear probes score best at the embeddings, layer 3, layer 4 and
layer 6 in the order below (the README's built-in task set section has the per-layer scores).

- ``intensity`` (regression, lexical): how strongly the sentence is worded, the mean strength of
  its evaluative phrases (adjective strength 1-3 times an intensifier's factor) whatever their
  polarity or negation. Which words occur decides it, so it is read best where word identity is
  sharpest, at the embeddings, and fades with depth.
- ``negation_scope`` (token, syntactic): ``CUE`` on negation words, ``SCOPE`` on every later word
  of their clause, ``O`` elsewhere. A relative clause is a clause of its own: a cue inside it
  scopes over the rest of the relative clause only, never over the main clause's words that
  follow it, so the tags follow clause structure rather than distance.
- ``sentiment`` (sequence, compositional): the polarity of the sentence once negation ("not",
  "never", a subject with "no", ...) has flipped the evaluative adjective in its scope and a
  clause after ``but`` has overridden the first.
- ``topic`` (sequence, semantic): which kind of thing the sentence is about (food, clothing,
  vehicle, music, writing or building), given by its subject (one of about 40 nouns of each kind)
  and, in half the relative clauses, a verb that fits the kind ("the soup that the chef cooked").
  The other nouns (places, people) belong to no kind. A probe must generalise over the meanings of
  many rare nouns, which the last layers of a sentence-embedding model organise best.

The labels are drawn first and the words chosen to fit them, which keeps the classes balanced and
independent of each other; the evaluative adjective's polarity is drawn independently of negation,
so sentiment is an exclusive-or that a bag-of-words model cannot represent. The open word classes
are large (about 230 nouns of the six kinds, 60 places, 70 people, 250 descriptive and 155 graded
evaluative adjectives), so that a probe cannot do well on the control task of Hewitt & Liang (one
random label per word type) by memorising word types. Generation uses only seeded
:class:`random.Random` streams (one per split), so the records are identical in every process.

This module holds the task set (its tasks, splits and fingerprint); the words are in
:mod:`.builtin_lexicon` and the grammar that draws a sentence and its labels in :mod:`.builtin_grammar`.
"""

from __future__ import annotations

import hashlib
import random
from typing import Mapping

from ..core.checksum import json_sha256
from ..errors import ConfigError, DatasetError
from .builtin_grammar import MAX_WORDS, Example, builtin_vocabulary, draw_sentence
from .builtin_lexicon import TOPICS
from .records import DatasetRecords, LabelTask, SplitRecords

__all__ = ["BUILTIN_NAME", "BUILTIN_VERSION", "DEFAULT_SIZES", "MAX_WORDS", "TASKS", "TOPICS", "load_builtin",
           "builtin_vocabulary", "describe_builtin_tasks"]

BUILTIN_NAME = "builtin"
BUILTIN_VERSION = 2
"""Bump whenever the grammar or the labelling changes, so caches of the old sentences are told apart."""
DEFAULT_SIZES = {"train": 3000, "validation": 1000, "test": 1000}
"""Held-out splits of 1,000 keep a per-layer accuracy's noise near 0.015, below the gaps between the layers
where the tasks peak."""

TASKS: tuple[LabelTask, ...] = (
    LabelTask("topic", "sequence", TOPICS),
    LabelTask("sentiment", "sequence", ("negative", "positive")),
    LabelTask("negation_scope", "token", ("O", "CUE", "SCOPE")),
    LabelTask("intensity", "regression", None),
)
# Splits are generated in this order and each excludes the sentences of those before it, so the
# held-out splits never depend on how large the training split is.
_GENERATION_ORDER = ("test", "validation", "train")


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

def load_builtin(seed: int = 0, sizes: dict[str, int] | None = None) -> DatasetRecords:
    """Generate the built-in task set.

    ``sizes`` maps each split to generate to its number of sentences (it replaces
    :data:`DEFAULT_SIZES` entirely, so leave a split out to skip it). Each split comes from its
    own random stream derived from ``seed`` and the split name; ``test`` is written first, then
    ``validation``, then ``train`` (then any other splits by name), each skipping sentences
    already used, so no sentence is shared between splits and the size of ``train`` never changes
    the held-out splits. The same ``seed`` and ``sizes`` give identical records in any process.
    """
    sizes = _checked_sizes(seed, sizes)
    used: set[tuple[str, ...]] = set()
    generated = {name: _generate_split(seed, name, sizes[name], used) for name in _generation_order(sizes)}
    task_names = [task.name for task in TASKS]
    return DatasetRecords(
        name=BUILTIN_NAME,
        config=None,
        splits={name: generated[name] for name in sizes},
        tasks=list(TASKS),
        fingerprint=_fingerprint(seed, sizes),
        columns=["words", *task_names],
        text_columns=["words"],
    )


def describe_builtin_tasks() -> dict[str, str]:
    """Task name -> one sentence saying what the task tests."""
    return {
        "topic": "Which kind of thing the sentence is about (food, clothing, vehicle, music, writing or building), "
                 "from the meaning of its subject noun and of the verb of its relative clause.",
        "sentiment": "Whether the sentence is positive or negative overall, once negation has flipped the "
                     "evaluative word in its scope and a clause after 'but' has overridden the first.",
        "negation_scope": "Which words are negation cues (CUE) and which later words of the same clause they "
                          "scope over (SCOPE), a relative clause being a clause of its own; everything else is O.",
        "intensity": "How strongly the sentence is worded: the mean strength of its evaluative phrases "
                     "(adjective strength times intensifier), whatever their polarity or negation.",
    }


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------

def _checked_sizes(seed: int, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """Validate the arguments of :func:`load_builtin`; return the split sizes to generate."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"the built-in task set needs an integer seed, not {seed!r}")
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    if not sizes:
        raise ConfigError("the built-in task set needs at least one split size, e.g. {'train': 3000}")
    for name, size in sizes.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"split names must be non-empty strings, not {name!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"split {name!r} needs a positive integer size, not {size!r}")
    return sizes


def _generation_order(sizes: Mapping[str, int]) -> list[str]:
    known = [name for name in _GENERATION_ORDER if name in sizes]
    return known + sorted(name for name in sizes if name not in _GENERATION_ORDER)


def _split_seed(seed: int, split: str) -> int:
    """A seed for one split's stream; sha256 rather than ``hash()``, which is salted per process."""
    key = f"{BUILTIN_NAME}/v{BUILTIN_VERSION}/seed={seed}/split={split}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def _fingerprint(seed: int, sizes: Mapping[str, int]) -> str:
    return json_sha256({"version": BUILTIN_VERSION, "seed": seed, "sizes": dict(sorted(sizes.items()))})


def _generate_split(seed: int, split: str, size: int, used: set[tuple[str, ...]]) -> SplitRecords:
    """Draw ``size`` sentences not in ``used`` (and adds them to it)."""
    rng = random.Random(_split_seed(seed, split))
    examples: list[Example] = []
    # The grammar has far more sentences than any sensible split; the cap only stops a runaway loop.
    for _ in range(100 * size + 10_000):
        example = draw_sentence(rng)
        key = tuple(example.words)
        if key not in used:
            used.add(key)
            examples.append(example)
            if len(examples) == size:
                break
    if len(examples) < size:
        raise DatasetError(f"could not generate {size} distinct built-in sentences for split {split!r}; "
                           "ask for a smaller size")
    return SplitRecords(
        words=[example.words for example in examples],
        labels={
            "topic": [example.topic for example in examples],
            "sentiment": [int(example.positive) for example in examples],
            "negation_scope": [example.scope_tags for example in examples],
            "intensity": [example.intensity for example in examples],
        },
    )
