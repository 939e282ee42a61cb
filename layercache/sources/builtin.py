"""The built-in task set: generated sentences that carry four labels at once.

A small seeded grammar with its own vocabulary writes sentences such as::

    the keys to the old cabinet that the guard never used are not very good but the lamp is great

and labels every sentence for four tasks, so that one cache of hidden states serves all of them:

- ``agreement`` (sequence): does the main verb agree in number with the subject head noun, which is
  separated from the verb by a prepositional phrase and/or relative clause (the "attractors")?
- ``sentiment`` (sequence): the polarity of the sentence, after negation and a deciding ``but`` clause.
- ``negation_scope`` (token): ``CUE`` on negation words, ``SCOPE`` on the rest of their clause.
- ``intensity`` (regression): the signed strength of the deciding evaluation.

Every label depends on structure rather than on which words occur: the subject and verb numbers
are drawn independently, and the evaluative word's polarity independently of negation, so a
bag-of-words model faces an exclusive-or it cannot represent. Generation uses only seeded
:class:`random.Random` streams (one per split), so the records are identical in every process.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Mapping

from ..core.checksum import json_sha256
from ..errors import ConfigError, DatasetError
from .records import DatasetRecords, LabelTask, SplitRecords

BUILTIN_NAME = "builtin"
BUILTIN_VERSION = 1
"""Bump whenever the grammar or the labelling changes, so caches of the old sentences are told apart."""
DEFAULT_SIZES = {"train": 2000, "validation": 500, "test": 500}

# --------------------------------------------------------------------------------------------
# Lexicon. Nouns are (singular, plural) pairs, indexed by a ``plural`` flag; verbs are
# (singular, plural) or (base, past).
# --------------------------------------------------------------------------------------------

# Things that get evaluated: the subject head nouns and the subjects of "but" clauses.
_THINGS: tuple[tuple[str, str], ...] = (
    ("key", "keys"), ("lamp", "lamps"), ("chair", "chairs"), ("book", "books"),
    ("song", "songs"), ("film", "films"), ("meal", "meals"), ("room", "rooms"),
    ("story", "stories"), ("garden", "gardens"), ("bridge", "bridges"), ("boat", "boats"),
    ("coat", "coats"), ("table", "tables"), ("window", "windows"), ("painting", "paintings"),
    ("letter", "letters"), ("road", "roads"), ("house", "houses"), ("bottle", "bottles"),
    ("box", "boxes"), ("bus", "buses"), ("knife", "knives"), ("shelf", "shelves"),
)
# Places only ever appear inside prepositional phrases, as attractors.
_PLACES: tuple[tuple[str, str], ...] = (
    ("cabinet", "cabinets"), ("door", "doors"), ("kitchen", "kitchens"), ("shop", "shops"),
    ("station", "stations"), ("village", "villages"), ("farm", "farms"), ("library", "libraries"),
    ("castle", "castles"), ("museum", "museums"), ("market", "markets"), ("city", "cities"),
)
# People are the subjects of relative clauses (another attractor); several plurals are irregular.
_PEOPLE: tuple[tuple[str, str], ...] = (
    ("guard", "guards"), ("teacher", "teachers"), ("farmer", "farmers"), ("painter", "painters"),
    ("child", "children"), ("man", "men"), ("woman", "women"), ("neighbor", "neighbors"),
    ("baker", "bakers"), ("student", "students"), ("sailor", "sailors"), ("person", "people"),
)
# Neutral descriptive adjectives for attractor nouns: never evaluative, so they never carry sentiment.
_DESCRIPTIVE = ("old", "new", "small", "large", "red", "blue", "wooden", "distant")
_PREPOSITIONS = ("to", "near", "behind", "beside", "in", "from", "by", "under")
# Relative-clause verbs are (base, past): the past tense carries no number, so the only number
# cues in a relative clause are its noun and the main verb it precedes.
_RELATIVE_VERBS: tuple[tuple[str, str], ...] = (
    ("buy", "bought"), ("sell", "sold"), ("choose", "chose"), ("find", "found"),
    ("keep", "kept"), ("make", "made"), ("use", "used"), ("borrow", "borrowed"),
    ("bring", "brought"), ("mention", "mentioned"), ("describe", "described"), ("show", "showed"),
)
# Finite main verbs as (singular, plural). The plural of a linking verb is also its base form,
# the one used after "does not".
_COPULAS: tuple[tuple[str, str], ...] = (("is", "are"), ("was", "were"))
_LINKING_VERBS: tuple[tuple[str, str], ...] = (
    ("seems", "seem"), ("looks", "look"), ("feels", "feel"), ("sounds", "sound"),
)
_DO = ("does", "do")
_CUES: tuple[tuple[str, ...], ...] = (("not",), ("never",), ("no", "longer"), ("hardly",))

# Evaluative adjectives with their strength: 1 mild, 2 clear, 3 extreme.
_POSITIVE: Mapping[str, int] = {
    "good": 1, "nice": 1, "fine": 1, "decent": 1, "great": 2, "lovely": 2, "charming": 2,
    "superb": 3, "excellent": 3, "wonderful": 3, "brilliant": 3,
}
_NEGATIVE: Mapping[str, int] = {
    "bad": 1, "poor": 1, "dull": 1, "weak": 1, "nasty": 2, "ugly": 2, "unpleasant": 2,
    "awful": 3, "terrible": 3, "dreadful": 3, "horrible": 3,
}
# Intensifiers scale the strength of the adjective they precede.
_INTENSIFIERS: Mapping[str, float] = {
    "slightly": 0.5, "fairly": 0.75, "very": 1.5, "really": 1.5, "extremely": 2.0,
}
NEGATION_FACTOR = -0.5
"""Negation flips the sign and halves the strength: "not great" is weaker than "awful"."""

# --------------------------------------------------------------------------------------------
# Probabilities of the grammar's choices.
# --------------------------------------------------------------------------------------------

_P_MODIFIERS = {"pp": 0.5, "rc": 0.3, "pp+rc": 0.2}
"""Every subject has at least one attractor phrase, which also keeps sentences at 7+ words."""
_P_OPPOSITE_ATTRACTOR = 0.5
_P_NEGATED_PREDICATE = 0.5
"""Half the predicates are negated, so the adjective's own polarity alone is a coin flip."""
_P_NEGATED_RELATIVE = 0.3
_P_BUT_CLAUSE = 0.4
_P_INTENSIFIER = 0.5
_P_ATTRACTOR_ADJECTIVE = 0.3

MAX_WORDS = 25
"""The longest sentence the grammar can write (checked by the tests)."""

TASKS: tuple[LabelTask, ...] = (
    LabelTask("agreement", "sequence", ("ungrammatical", "grammatical")),
    LabelTask("sentiment", "sequence", ("negative", "positive")),
    LabelTask("negation_scope", "token", ("O", "CUE", "SCOPE")),
    LabelTask("intensity", "regression", None),
)
_O, _CUE, _SCOPE = 0, 1, 2
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


def builtin_vocabulary() -> list[str]:
    """Every word the grammar can emit, sorted and lower-case (for building tiny test tokenizers)."""
    words = {"the", "that", "but", "did", *_DESCRIPTIVE, *_PREPOSITIONS, *_DO, *_POSITIVE,
             *_NEGATIVE, *_INTENSIFIERS}
    for pairs in (_THINGS, _PLACES, _PEOPLE, _RELATIVE_VERBS, _COPULAS, _LINKING_VERBS, _CUES):
        for pair in pairs:
            words.update(pair)
    return sorted(words)


def describe_builtin_tasks() -> dict[str, str]:
    """Task name -> one sentence saying what the task tests."""
    return {
        "agreement": "Whether the main verb agrees in number with the subject head noun across an "
                     "intervening prepositional phrase or relative clause whose noun may have the other number.",
        "sentiment": "Whether the sentence is positive or negative overall, once negation has flipped the "
                     "evaluative word in its scope and a clause after 'but' has overridden the first.",
        "negation_scope": "Which words are negation cues (CUE) and which words of the same clause they "
                          "scope over (SCOPE), everything else being O.",
        "intensity": "The signed strength of the deciding evaluation: adjective strength times intensifier, "
                     "with negation flipping the sign and halving the strength.",
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
        raise ConfigError("the built-in task set needs at least one split size, e.g. {'train': 2000}")
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
    examples: list[_Example] = []
    # The grammar has far more sentences than any sensible split; the cap only stops a runaway loop.
    for _ in range(100 * size + 10_000):
        if len(examples) == size:
            break
        example = _sentence(rng)
        key = tuple(example.words)
        if key not in used:
            used.add(key)
            examples.append(example)
    else:
        raise DatasetError(f"could not generate {size} distinct built-in sentences for split {split!r}; "
                           "ask for a smaller size")
    return SplitRecords(
        words=[example.words for example in examples],
        labels={
            "agreement": [int(example.grammatical) for example in examples],
            "sentiment": [int(example.positive) for example in examples],
            "negation_scope": [example.scope_tags for example in examples],
            "intensity": [example.intensity for example in examples],
        },
    )


# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------

@dataclass
class _Segment:
    """A run of words with their negation tags; a cue's scope never leaves its segment."""

    words: list[str]
    tags: list[int]

    @classmethod
    def plain(cls, words: list[str]) -> "_Segment":
        return cls(list(words), [_O] * len(words))

    def then(self, words: list[str], *, cue: bool = False) -> "_Segment":
        """Append words: cue words are CUE, and every later word of the segment is in their SCOPE."""
        in_scope = _CUE in self.tags
        tag = _CUE if cue else (_SCOPE if in_scope else _O)
        return _Segment(self.words + list(words), self.tags + [tag] * len(words))


@dataclass
class _Example:
    words: list[str]
    scope_tags: list[int]
    grammatical: bool
    positive: bool
    intensity: float


def _sentence(rng: random.Random) -> _Example:
    """One sentence: subject with attractors, predicate, and optionally a deciding "but" clause.

    The labels are drawn first and the words chosen to fit them, which keeps every class balanced
    and independent of the others.
    """
    grammatical = rng.random() < 0.5
    positive = rng.random() < 0.5
    head_plural = rng.random() < 0.5
    has_but_clause = rng.random() < _P_BUT_CLAUSE

    segments = _subject(rng, head_plural)
    verb_plural = head_plural if grammatical else not head_plural
    # "but" contrasts: the first clause says the opposite of the sentence's overall polarity.
    first_positive = positive if not has_but_clause else not positive
    predicate, intensity = _predicate(rng, _Segment.plain([]), verb_plural, first_positive)
    segments.append(predicate)
    if has_but_clause:
        plural = rng.random() < 0.5
        opening = _Segment.plain(["but", "the", rng.choice(_THINGS)[plural]])
        # The "but" clause always agrees: the agreement label is about the attracted main verb only.
        clause, intensity = _predicate(rng, opening, plural, positive)
        segments.append(clause)

    words = [word for segment in segments for word in segment.words]
    tags = [tag for segment in segments for tag in segment.tags]
    return _Example(words, tags, grammatical, positive, intensity)


def _subject(rng: random.Random, head_plural: bool) -> list[_Segment]:
    """"the N" followed by a prepositional phrase, a relative clause, or both (the attractors).

    In about half the sentences one attractor noun has the other number than the head noun; in
    the rest every attractor noun shares its number.
    """
    head = rng.choice(_THINGS)
    kinds = rng.choices(list(_P_MODIFIERS), weights=list(_P_MODIFIERS.values()))[0].split("+")
    opposite = rng.choice(kinds) if rng.random() < _P_OPPOSITE_ATTRACTOR else None
    numbers = {kind: _attractor_number(rng, head_plural, kind == opposite, opposite is not None) for kind in kinds}

    segments = [_Segment.plain(["the", head[head_plural]])]
    if "pp" in numbers:
        nouns = [pair for pair in _PLACES + _THINGS if pair != head]  # never "the key to the keys"
        segments[0] = segments[0].then([rng.choice(_PREPOSITIONS), *_attractor_noun(rng, nouns, numbers["pp"])])
    if "rc" in numbers:
        segments.append(_relative_clause(rng, numbers["rc"]))
    return segments


def _attractor_number(rng: random.Random, head_plural: bool, is_opposite: bool, has_opposite: bool) -> bool:
    """The number of one attractor noun: forced opposite, forced equal, or free beside a forced opposite."""
    if is_opposite:
        return not head_plural
    if not has_opposite:
        return head_plural
    return rng.random() < 0.5


def _attractor_noun(rng: random.Random, nouns: list[tuple[str, str]], plural: bool) -> list[str]:
    """"the [adjective] N" with N in the given number."""
    adjective = [rng.choice(_DESCRIPTIVE)] if rng.random() < _P_ATTRACTOR_ADJECTIVE else []
    return ["the", *adjective, rng.choice(nouns)[plural]]


def _relative_clause(rng: random.Random, plural: bool) -> _Segment:
    """"that the N V-ed", possibly negated; the cue's scope ends with the clause, before the main verb."""
    # No adjective here: it would let the longest sentences pass MAX_WORDS.
    clause = _Segment.plain(["that", "the", rng.choice(_PEOPLE)[plural]])
    base, past = rng.choice(_RELATIVE_VERBS)
    cue = rng.choice(_CUES) if rng.random() < _P_NEGATED_RELATIVE else None
    if cue is None:
        return clause.then([past])
    if cue == ("not",):
        return clause.then(["did"]).then(["not"], cue=True).then([base])
    return clause.then(list(cue), cue=True).then([past])


def _predicate(rng: random.Random, opening: _Segment, plural: bool, positive: bool) -> tuple[_Segment, float]:
    """Verb group and evaluation, appended to ``opening``, ending up ``positive`` or not overall.

    Returns the segment and its intensity. Negation is drawn independently of the final polarity
    and the adjective's polarity is then chosen to fit, so neither alone predicts the outcome.
    """
    cue = rng.choice(_CUES) if rng.random() < _P_NEGATED_PREDICATE else None
    clause = _verb_group(rng, opening, plural, cue)
    adjective_positive = positive if cue is None else not positive
    evaluation, intensity = _evaluation(rng, adjective_positive)
    if cue is not None:
        intensity *= NEGATION_FACTOR
    return clause.then(evaluation), round(intensity, 4)


def _verb_group(rng: random.Random, opening: _Segment, plural: bool, cue: tuple[str, ...] | None) -> _Segment:
    """The finite verb in the given number, with the negation cue if any.

    "is not" / "was never" for copulas; "does not seem" / "never seems" for linking verbs, where
    "does" is the word that carries number.
    """
    if rng.random() < 0.5:
        verb = rng.choice(_COPULAS)[plural]
        return opening.then([verb]) if cue is None else opening.then([verb]).then(list(cue), cue=True)
    singular, base = rng.choice(_LINKING_VERBS)
    if cue is None:
        return opening.then([base if plural else singular])
    if cue == ("not",):
        return opening.then([_DO[plural]]).then(["not"], cue=True).then([base])
    return opening.then(list(cue), cue=True).then([base if plural else singular])


def _evaluation(rng: random.Random, positive: bool) -> tuple[list[str], float]:
    """"[intensifier] ADJ" and its signed strength before negation."""
    lexicon = _POSITIVE if positive else _NEGATIVE
    adjective = rng.choice(list(lexicon))
    strength = float(lexicon[adjective]) * (1.0 if positive else -1.0)
    if rng.random() < _P_INTENSIFIER:
        intensifier = rng.choice(list(_INTENSIFIERS))
        return [intensifier, adjective], strength * _INTENSIFIERS[intensifier]
    return [adjective], strength
