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
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Mapping

from ..core.checksum import json_sha256
from ..errors import ConfigError, DatasetError
from .records import DatasetRecords, LabelTask, SplitRecords

BUILTIN_NAME = "builtin"
BUILTIN_VERSION = 2
"""Bump whenever the grammar or the labelling changes, so caches of the old sentences are told apart."""
DEFAULT_SIZES = {"train": 3000, "validation": 1000, "test": 1000}
"""Held-out splits of 1,000 keep a per-layer accuracy's noise near 0.015, below the gaps between the layers
where the tasks peak."""


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    """``"key keys, box boxes"`` -> ``(("key", "keys"), ("box", "boxes"))``."""
    return tuple((first, second) for first, second in (item.split() for item in text.split(",")))


# --------------------------------------------------------------------------------------------
# Lexicon. Nouns are (singular, plural) pairs, indexed by a ``plural`` flag; verbs are
# (singular, plural) or (base, past).
# --------------------------------------------------------------------------------------------

# The kinds of thing a sentence can be about, with the nouns of each kind and verbs that fit them
# (used in relative clauses: "the soup that the chef cooked"). The kinds are the ``topic`` labels.
_KINDS: Mapping[str, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]] = {
    "food": (_pairs(
        "sandwich sandwiches, cake cakes, pie pies, soup soups, salad salads, pizza pizzas, cookie cookies, "
        "apple apples, peach peaches, cherry cherries, potato potatoes, tomato tomatoes, onion onions, "
        "carrot carrots, lemon lemons, meal meals, dinner dinners, stew stews, pancake pancakes, "
        "omelette omelettes, sausage sausages, biscuit biscuits, muffin muffins, pudding puddings, "
        "noodle noodles, burger burgers, steak steaks, pear pears, plum plums, melon melons, bun buns, "
        "loaf loaves, cheese cheeses, tart tarts, curry curries, dumpling dumplings, pastry pastries, "
        "waffle waffles, berry berries, cucumber cucumbers"),
        _pairs("eat ate, cook cooked, bake baked, taste tasted, serve served, fry fried, slice sliced, "
               "peel peeled")),
    "clothing": (_pairs(
        "coat coats, jacket jackets, shirt shirts, dress dresses, skirt skirts, sweater sweaters, "
        "scarf scarves, hat hats, boot boots, shoe shoes, glove gloves, sock socks, belt belts, "
        "uniform uniforms, blouse blouses, vest vests, apron aprons, cap caps, gown gowns, robe robes, "
        "sandal sandals, slipper slippers, cloak cloaks, tie ties, costume costumes, hood hoods, "
        "bonnet bonnets, tunic tunics, raincoat raincoats, overcoat overcoats, cardigan cardigans, "
        "mitten mittens, collar collars, sleeve sleeves, pocket pockets, jumper jumpers, beret berets, "
        "shawl shawls, suit suits"),
        _pairs("wear wore, wash washed, sew sewed, iron ironed, knit knitted, mend mended, fold folded, "
               "button buttoned")),
    "vehicle": (_pairs(
        "car cars, truck trucks, bus buses, train trains, plane planes, ship ships, boat boats, "
        "bicycle bicycles, wagon wagons, cart carts, sled sleds, van vans, taxi taxis, tractor tractors, "
        "motorcycle motorcycles, scooter scooters, canoe canoes, yacht yachts, ferry ferries, jeep jeeps, "
        "tram trams, helicopter helicopters, submarine submarines, ambulance ambulances, "
        "limousine limousines, bike bikes, kayak kayaks, sailboat sailboats, lorry lorries, "
        "carriage carriages, trolley trolleys, rocket rockets, glider gliders, raft rafts, barge barges, "
        "minibus minibuses, sedan sedans"),
        _pairs("drive drove, ride rode, park parked, steer steered, tow towed, crash crashed, fuel fueled, "
               "race raced")),
    "music": (_pairs(
        "guitar guitars, piano pianos, violin violins, drum drums, trumpet trumpets, flute flutes, "
        "cello cellos, harp harps, song songs, concert concerts, album albums, melody melodies, "
        "symphony symphonies, opera operas, ballad ballads, anthem anthems, lullaby lullabies, "
        "chorus choruses, banjo banjos, clarinet clarinets, saxophone saxophones, trombone trombones, "
        "organ organs, accordion accordions, harmonica harmonicas, tambourine tambourines, "
        "xylophone xylophones, ukulele ukuleles, hymn hymns, duet duets, sonata sonatas, carol carols, "
        "rhythm rhythms, solo solos, overture overtures, waltz waltzes, serenade serenades"),
        _pairs("play played, tune tuned, hear heard, perform performed, rehearse rehearsed, "
               "compose composed, hum hummed, strum strummed")),
    "writing": (_pairs(
        "book books, novel novels, poem poems, letter letters, story stories, magazine magazines, "
        "newspaper newspapers, diary diaries, essay essays, report reports, chapter chapters, "
        "article articles, manual manuals, journal journals, leaflet leaflets, pamphlet pamphlets, "
        "script scripts, note notes, memoir memoirs, biography biographies, textbook textbooks, "
        "dictionary dictionaries, brochure brochures, catalogue catalogues, postcard postcards, "
        "review reviews, column columns, headline headlines, paragraph paragraphs, sentence sentences, "
        "page pages, verse verses, riddle riddles, fable fables, legend legends, comic comics, "
        "thesis theses, notebook notebooks"),
        _pairs("read read, write wrote, print printed, publish published, edit edited, "
               "translate translated, proofread proofread, underline underlined")),
    "building": (_pairs(
        "house houses, hotel hotels, church churches, school schools, hospital hospitals, office offices, "
        "garage garages, tower towers, castle castles, museum museums, library libraries, "
        "station stations, shop shops, palace palaces, temple temples, theater theaters, "
        "restaurant restaurants, cafe cafes, bakery bakeries, factory factories, warehouse warehouses, "
        "stadium stadiums, airport airports, cottage cottages, barn barns, cabin cabins, "
        "mansion mansions, chapel chapels, cathedral cathedrals, prison prisons, "
        "lighthouse lighthouses, bungalow bungalows, apartment apartments, villa villas, "
        "farmhouse farmhouses, skyscraper skyscrapers, gym gyms, pharmacy pharmacies, bank banks, "
        "inn inns"),
        _pairs("visit visited, build built, enter entered, rent rented, renovate renovated, "
               "demolish demolished, inhabit inhabited, tour toured")),
}
TOPICS = tuple(_KINDS)
"""The ``topic`` labels, in label order."""
# Places and furnishings, for prepositional phrases: they belong to no kind, so a sentence is only
# ever about its subject's kind.
_PLACES = _pairs(
    "window windows, door doors, corner corners, wall walls, gate gates, fence fences, path paths, road roads, "
    "street streets, bridge bridges, river rivers, lake lakes, hill hills, field fields, yard yards, "
    "garden gardens, forest forests, beach beaches, harbor harbors, tree trees, bench benches, "
    "staircase staircases, hallway hallways, attic attics, cellar cellars, basement basements, "
    "balcony balconies, porch porches, roof roofs, tunnel tunnels, table tables, shelf shelves, desk desks, "
    "chair chairs, cupboard cupboards, drawer drawers, box boxes, basket baskets, lamp lamps, mirror mirrors, "
    "clock clocks, curtain curtains, carpet carpets, sofa sofas, bed beds, pillow pillows, blanket blankets, "
    "counter counters, sink sinks, stove stoves, fridge fridges, pond ponds, meadow meadows, cliff cliffs, "
    "valley valleys, island islands, mountain mountains, cave caves, desert deserts, fountain fountains")
# People are the subjects of relative clauses; several plurals are irregular.
_PEOPLE = _pairs(
    "guard guards, teacher teachers, farmer farmers, painter painters, child children, man men, "
    "woman women, neighbor neighbors, baker bakers, student students, sailor sailors, person people, "
    "doctor doctors, nurse nurses, driver drivers, pilot pilots, chef chefs, writer writers, "
    "singer singers, dancer dancers, actor actors, author authors, artist artists, builder builders, "
    "gardener gardeners, tailor tailors, waiter waiters, clerk clerks, lawyer lawyers, judge judges, "
    "soldier soldiers, captain captains, king kings, queen queens, prince princes, princess princesses, "
    "boy boys, girl girls, friend friends, cousin cousins, uncle uncles, aunt aunts, brother brothers, "
    "sister sisters, mother mothers, father fathers, visitor visitors, tourist tourists, "
    "stranger strangers, customer customers, owner owners, manager managers, worker workers, "
    "fisherman fishermen, hunter hunters, priest priests, monk monks, poet poets, scientist scientists, "
    "engineer engineers, mechanic mechanics, carpenter carpenters, plumber plumbers, banker bankers, "
    "player players, critic critics, reporter reporters, editor editors, director directors, "
    "professor professors")
# Verbs that fit any kind of thing, for relative clauses that say nothing about the topic.
_GENERIC_VERBS = _pairs(
    "buy bought, sell sold, find found, keep kept, mention mentioned, describe described, choose chose, "
    "remember remembered, notice noticed, recommend recommended, discover discovered, "
    "photograph photographed, borrow borrowed, bring brought, show showed, share shared")
# Neutral descriptive adjectives (colour, material, shape, size, order, origin, ...): never
# evaluative, so they never carry sentiment or intensity. There are many so that no one of them is
# frequent enough for a probe to memorise it.
_DESCRIPTIVE = tuple("""
    old new small large red blue green yellow brown black white grey purple orange pink beige crimson
    violet turquoise maroon navy ivory amber olive teal scarlet bronze copper lilac tan khaki indigo coral
    emerald wooden metal plastic glass stone paper cotton woolen leather silver golden steel brass tin clay
    marble granite velvet silk linen denim straw bamboo oak pine maple ceramic porcelain rubber canvas
    concrete brick wicker cardboard nylon suede satin tweed cedar walnut ebony crystal pewter round square
    oval triangular rectangular curved flat hollow pointed checked plaid dotted patterned striped spotted
    plain crooked straight tilted circular slanted narrow wide tall short long heavy empty full thick thin
    tiny huge little big medium miniature oversized giant compact slim broad deep shallow young older newer
    antique recent current former previous original spare first second third fourth fifth sixth seventh
    eighth ninth tenth last final other same usual distant nearby northern southern eastern western local
    foreign ancient modern rural urban upstairs downstairs hidden familiar public private official secret
    french italian spanish german dutch swiss irish scottish welsh greek turkish polish russian chinese
    japanese korean indian mexican brazilian canadian american british african asian european nordic
    arctic tropical coastal alpine inland seaside central provincial municipal national weekly monthly
    yearly daily nightly seasonal upper lower inner outer front rear middle numbered labeled unlabeled
    wrapped sealed loose matching identical similar different various extra standard typical common
    single double triple twin quiet busy hot cold warm wet dry frozen sandy rocky grassy dark pale
    bright""".split())
_PREPOSITIONS = tuple("to near behind beside in from by under above below inside outside across beyond past "
                      "along".split())
# Finite main verbs as (singular, plural). The plural of a linking verb is also its base form,
# the one used after "does not".
_COPULAS = _pairs("is are, was were")
_LINKING_VERBS = _pairs("seems seem, looks look, feels feel, sounds sound")
_DO = ("does", "do")
_CUES: tuple[tuple[str, ...], ...] = (("not",), ("never",), ("no", "longer"), ("hardly",))
_NO = "no"
"""The determiner that negates a clause from its subject: "no keys to the shop are good"."""


def _graded(levels: Mapping[int, str]) -> dict[str, int]:
    return {word: strength for strength, words in levels.items() for word in words.split()}


# Evaluative adjectives with their strength: 1 mild, 2 clear, 3 extreme.
_POSITIVE: Mapping[str, int] = _graded({
    1: "good nice fine decent pleasant okay solid fair tidy neat handy useful sturdy friendly cheerful "
       "comfortable cozy pretty cute sweet tasty fresh clean smooth helpful reliable satisfying agreeable "
       "likeable welcome",
    2: "great lovely charming delightful beautiful enjoyable elegant graceful impressive remarkable "
       "fascinating exciting inspiring refreshing delicious gorgeous admirable splendid terrific adorable "
       "clever witty superior rewarding valuable",
    3: "superb excellent wonderful brilliant amazing outstanding fantastic perfect magnificent glorious "
       "marvelous stunning flawless exquisite sublime extraordinary spectacular phenomenal breathtaking "
       "heavenly incredible dazzling masterful divine",
})
_NEGATIVE: Mapping[str, int] = _graded({
    1: "bad poor dull weak mediocre boring bland stale messy clumsy awkward tedious tiresome flimsy shabby "
       "cheap noisy uncomfortable cramped sloppy faulty forgettable inferior lousy irritating sour tacky crude",
    2: "nasty ugly unpleasant annoying disappointing miserable gloomy dismal depressing frustrating "
       "confusing painful useless pointless ridiculous pathetic filthy rotten smelly greasy soggy "
       "unreliable worthless broken",
    3: "awful terrible dreadful horrible appalling atrocious disgusting hideous abysmal unbearable "
       "intolerable revolting repulsive ghastly horrid vile catastrophic disastrous nightmarish dire woeful "
       "wretched sickening putrid",
})
# Intensifiers scale the strength of the adjective they precede.
_INTENSIFIERS: Mapping[str, float] = {
    "slightly": 0.5, "somewhat": 0.6, "fairly": 0.75, "rather": 0.75, "quite": 1.25, "very": 1.5,
    "really": 1.5, "truly": 1.75, "extremely": 2.0, "incredibly": 2.0,
}

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

TASKS: tuple[LabelTask, ...] = (
    LabelTask("topic", "sequence", TOPICS),
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
    words = {"the", "that", "but", "did", "it", "they", _NO, *_DESCRIPTIVE, *_PREPOSITIONS, *_DO, *_POSITIVE,
             *_NEGATIVE, *_INTENSIFIERS}
    pair_lists = [_PLACES, _PEOPLE, _GENERIC_VERBS, _COPULAS, _LINKING_VERBS, _CUES]
    for nouns, verbs in _KINDS.values():
        pair_lists += [nouns, verbs]
    for pairs in pair_lists:
        for pair in pairs:
            words.update(pair)
    return sorted(words)


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
    examples: list[_Example] = []
    # The grammar has far more sentences than any sensible split; the cap only stops a runaway loop.
    for _ in range(100 * size + 10_000):
        example = _sentence(rng)
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


# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------

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
class _Example:
    words: list[str]
    scope_tags: list[int]
    topic: int
    positive: bool
    intensity: float


def _sentence(rng: random.Random) -> _Example:
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
        main.cue(_NO)
        _noun_phrase(rng, main, rng.choice(_KINDS[kind][0])[plural], _P_ADJECTIVE_AFTER_NO, article=False)
    else:
        _noun_phrase(rng, main, rng.choice(_KINDS[kind][0])[plural], _P_ADJECTIVE)
        modifiers = rng.choices(list(_P_MODIFIERS), weights=list(_P_MODIFIERS.values()))[0].split("+")
        if "pp" in modifiers:
            main.say(rng.choice(_PREPOSITIONS))
            _noun_phrase(rng, main, rng.choice(_PLACES)[rng.random() < 0.5], _P_ADJECTIVE)
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
    return _Example(sentence.words, sentence.tags, TOPICS.index(kind), positive, round(intensity, 4))


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
        clause.say(rng.choice(_DESCRIPTIVE))
    clause.say(noun)


def _relative_clause(rng: random.Random, clause: _Clause, head_kind: str) -> None:
    """"that the N V-ed", possibly negated; a clause of its own, so its cue's scope ends with it."""
    # No adjective here: it would let the longest sentences pass MAX_WORDS.
    clause.say("that", "the", rng.choice(_PEOPLE)[rng.random() < 0.5])
    verbs = _KINDS[head_kind][1] if rng.random() < _P_TOPIC_VERB else _GENERIC_VERBS
    base, past = rng.choice(verbs)
    cue = rng.choice(_CUES) if rng.random() < _P_NEGATED_RELATIVE else None
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
    cue = rng.choice(_CUES) if negated == "verb" else None
    _verb_group(rng, clause, plural, cue)
    adjective_positive = positive if negated is None else not positive
    lexicon = _POSITIVE if adjective_positive else _NEGATIVE
    adjective = rng.choice(list(lexicon))
    strength = float(lexicon[adjective])
    if rng.random() < _P_INTENSIFIER:
        intensifier = rng.choice(list(_INTENSIFIERS))
        clause.say(intensifier)
        strength *= _INTENSIFIERS[intensifier]
    clause.say(adjective)
    return strength


def _verb_group(rng: random.Random, clause: _Clause, plural: bool, cue: tuple[str, ...] | None) -> None:
    """The finite verb in the given number, with the negation cue if any.

    "is not" / "was never" for copulas; "does not seem" / "never seems" for linking verbs, where
    "does" is the word that carries number.
    """
    if rng.random() < 0.5:
        clause.say(rng.choice(_COPULAS)[plural])
        if cue is not None:
            clause.cue(*cue)
        return
    singular, base = rng.choice(_LINKING_VERBS)
    if cue is None:
        clause.say(base if plural else singular)
    elif cue == ("not",):
        clause.say(_DO[plural]).cue("not").say(base)
    else:
        clause.cue(*cue).say(base if plural else singular)
