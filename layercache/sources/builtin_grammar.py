"""The built-in task set's grammar: one seeded random sentence and its four labels.

The labels are drawn first and the words chosen to fit them (:func:`draw_sentence`), from the
lexicon of :mod:`.builtin_lexicon`; the probabilities below decide the grammar's choices. Every
draw comes from the :class:`random.Random` stream it is given, in a fixed order, so a seed gives
the same sentences in every process. Changing a choice changes the sentences: bump
:data:`~.builtin.BUILTIN_VERSION`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .builtin_lexicon import (
    COPULAS,
    CUES,
    DESCRIPTIVE,
    DO,
    GENERIC_VERBS,
    INTENSIFIERS,
    KINDS,
    LINKING_VERBS,
    NEGATIVE,
    NO,
    PEOPLE,
    PLACES,
    POSITIVE,
    PREPOSITIONS,
    TOPICS,
)

# --------------------------------------------------------------------------------------------
# Probabilities of the grammar's choices.
# --------------------------------------------------------------------------------------------

_P_MODIFIERS = {"pp": 0.5, "rc": 0.2, "pp+rc": 0.3}
"""A "the" subject has a prepositional phrase (about a place), a relative clause or both."""
_P_BUT_CLAUSE = 0.35
_P_NEGATED = 0.5
"""Half the evaluating clauses are negated, so the adjective's own polarity alone is a coin flip."""
_P_NEGATED_BY_SUBJECT = 0.6
"""Of the negated main clauses, the share negated by "no" on the subject rather than by a cue after the verb."""
_P_NEGATED_RELATIVE = 0.6
_P_TOPIC_VERB = 0.5
"""Relative-clause verbs that fit the subject's kind ("the soup that the chef cooked"); else generic."""
_P_INTENSIFIER = 0.5
_P_ADJECTIVE = 0.5
_P_ADJECTIVE_AFTER_NO = 0.7

MAX_WORDS = 25
"""The longest sentence the grammar can write (checked by the tests)."""

_O, _CUE, _SCOPE = 0, 1, 2  # the negation_scope tags


@dataclass
class _Sentence:
    """The words written so far and their negation tags."""

    words: list[str] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)


@dataclass
class _Clause:
    """One clause of a sentence; its words may be interrupted by another clause's (a relative clause).

    A cue puts every later word of its clause in SCOPE, however many words of other clauses come
    in between, and never a word of another clause.
    """

    sentence: _Sentence
    negated: bool = False

    def say(self, *words: str) -> "_Clause":
        """Append plain words: SCOPE once the clause has had a cue, else O."""
        self.sentence.words.extend(words)
        self.sentence.tags.extend([_SCOPE if self.negated else _O] * len(words))
        return self

    def cue(self, *words: str) -> "_Clause":
        """Append negation cue words (CUE); the rest of the clause is in their scope."""
        self.sentence.words.extend(words)
        self.sentence.tags.extend([_CUE] * len(words))
        self.negated = True
        return self


@dataclass
class Example:
    """One generated sentence: its words, negation tags per word, and the other three labels."""

    words: list[str]
    scope_tags: list[int]
    topic: int
    positive: bool
    intensity: float


def draw_sentence(rng: random.Random) -> Example:
    """One sentence: a main clause about one thing, and optionally a deciding "but" clause about it.

    The labels are drawn first and the words chosen to fit them, which keeps every class balanced
    and independent of the others.
    """
    positive = rng.random() < 0.5
    has_but_clause = rng.random() < _P_BUT_CLAUSE
    kind = rng.choice(TOPICS)
    plural = rng.random() < 0.5

    sentence = _Sentence()
    main = _Clause(sentence)
    negation = _main_negation(rng)
    if negation == "subject":
        # "no" negates the whole clause from its first word; the subject takes no modifiers, which
        # keeps these long scopes in one piece.
        main.cue(NO)
        _noun_phrase(rng, main, rng.choice(KINDS[kind][0])[plural], _P_ADJECTIVE_AFTER_NO, article=False)
    else:
        _noun_phrase(rng, main, rng.choice(KINDS[kind][0])[plural], _P_ADJECTIVE)
        modifiers = rng.choices(list(_P_MODIFIERS), weights=list(_P_MODIFIERS.values()))[0].split("+")
        if "pp" in modifiers:
            main.say(rng.choice(PREPOSITIONS))
            _noun_phrase(rng, main, rng.choice(PLACES)[rng.random() < 0.5], _P_ADJECTIVE)
        if "rc" in modifiers:
            _relative_clause(rng, _Clause(sentence), kind)
    # "but" contrasts: the first clause says the opposite of the sentence's overall polarity.
    first_positive = positive if not has_but_clause else not positive
    strengths = [_predicate(rng, main, plural, first_positive, negated=negation)]
    if has_but_clause:
        # A second verdict on the same thing, which overrides the first.
        clause = _Clause(sentence).say("but", ("it", "they")[plural])
        negation = "verb" if rng.random() < _P_NEGATED else None
        strengths.append(_predicate(rng, clause, plural, positive, negated=negation))
    intensity = sum(strengths) / len(strengths)
    return Example(sentence.words, sentence.tags, TOPICS.index(kind), positive, round(intensity, 4))


def _main_negation(rng: random.Random) -> str | None:
    """Whether and where the main clause is negated: ``None``, ``"subject"`` ("no") or ``"verb"``."""
    if rng.random() >= _P_NEGATED:
        return None
    return "subject" if rng.random() < _P_NEGATED_BY_SUBJECT else "verb"


def _noun_phrase(rng: random.Random, clause: _Clause, noun: str, adjective: float, *, article: bool = True) -> None:
    """"the [adjective] N" (without "the" after "no")."""
    if article:
        clause.say("the")
    if rng.random() < adjective:
        clause.say(rng.choice(DESCRIPTIVE))
    clause.say(noun)


def _relative_clause(rng: random.Random, clause: _Clause, head_kind: str) -> None:
    """"that the N V-ed", possibly negated; a clause of its own, so its cue's scope ends with it."""
    # No adjective here: it would let the longest sentences pass MAX_WORDS.
    clause.say("that", "the", rng.choice(PEOPLE)[rng.random() < 0.5])
    verbs = KINDS[head_kind][1] if rng.random() < _P_TOPIC_VERB else GENERIC_VERBS
    base, past = rng.choice(verbs)
    cue = rng.choice(CUES) if rng.random() < _P_NEGATED_RELATIVE else None
    if cue is None:
        clause.say(past)
    elif cue == ("not",):
        clause.say("did").cue("not").say(base)
    else:
        clause.cue(*cue).say(past)


def _predicate(rng: random.Random, clause: _Clause, plural: bool, positive: bool, *, negated: str | None) -> float:
    """Verb group and evaluation, appended to ``clause``, ending up ``positive`` or not overall.

    ``negated`` says where the clause is negated (``"subject"``: already, by "no"; ``"verb"``: here,
    after the verb). Negation is drawn independently of the final polarity and the adjective's
    polarity is then chosen to fit, so neither alone predicts the outcome. Returns the strength of
    the evaluation (adjective strength times intensifier), which ignores polarity and negation.
    """
    cue = rng.choice(CUES) if negated == "verb" else None
    _verb_group(rng, clause, plural, cue)
    adjective_positive = positive if negated is None else not positive
    lexicon = POSITIVE if adjective_positive else NEGATIVE
    adjective = rng.choice(list(lexicon))
    strength = float(lexicon[adjective])
    if rng.random() < _P_INTENSIFIER:
        intensifier = rng.choice(list(INTENSIFIERS))
        clause.say(intensifier)
        strength *= INTENSIFIERS[intensifier]
    clause.say(adjective)
    return strength


def _verb_group(rng: random.Random, clause: _Clause, plural: bool, cue: tuple[str, ...] | None) -> None:
    """The finite verb in the given number, with the negation cue if any.

    "is not" / "was never" for copulas; "does not seem" / "never seems" for linking verbs, where
    "does" is the word that carries number.
    """
    if rng.random() < 0.5:
        clause.say(rng.choice(COPULAS)[plural])
        if cue is not None:
            clause.cue(*cue)
        return
    singular, base = rng.choice(LINKING_VERBS)
    if cue is None:
        clause.say(base if plural else singular)
    elif cue == ("not",):
        clause.say(DO[plural]).cue("not").say(base)
    else:
        clause.cue(*cue).say(base if plural else singular)


def builtin_vocabulary() -> list[str]:
    """Every word the grammar can emit, sorted and lower-case (for building tiny test tokenizers)."""
    words = {"the", "that", "but", "did", "it", "they", NO, *DESCRIPTIVE, *PREPOSITIONS, *DO, *POSITIVE,
             *NEGATIVE, *INTENSIFIERS}
    pair_lists = [PLACES, PEOPLE, GENERIC_VERBS, COPULAS, LINKING_VERBS, CUES]
    for nouns, verbs in KINDS.values():
        pair_lists += [nouns, verbs]
    for pairs in pair_lists:
        for pair in pairs:
            words.update(pair)
    return sorted(words)
