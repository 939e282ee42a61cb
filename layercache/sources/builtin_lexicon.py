"""The built-in task set's lexicon: the words its grammar (:mod:`.builtin_grammar`) writes, by class.

Nouns are (singular, plural) pairs, indexed by a ``plural`` flag; verbs are (singular, plural) or
(base, past). The kinds of thing a sentence can be about (:data:`KINDS`) are the ``topic`` labels;
evaluative adjectives carry a strength (1 mild, 2 clear, 3 extreme) and intensifiers a factor, from
which the ``intensity`` label is computed. Changing a word changes the sentences: bump
:data:`~.builtin.BUILTIN_VERSION`.
"""

from __future__ import annotations

from typing import Mapping


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    """``"key keys, box boxes"`` -> ``(("key", "keys"), ("box", "boxes"))``."""
    return tuple((first, second) for first, second in (item.split() for item in text.split(",")))


# --------------------------------------------------------------------------------------------
# Lexicon. Nouns are (singular, plural) pairs, indexed by a ``plural`` flag; verbs are
# (singular, plural) or (base, past).
# --------------------------------------------------------------------------------------------

# The kinds of thing a sentence can be about, with the nouns of each kind and verbs that fit them
# (used in relative clauses: "the soup that the chef cooked"). The kinds are the ``topic`` labels.
KINDS: Mapping[str, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]] = {
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
TOPICS = tuple(KINDS)
"""The ``topic`` labels, in label order."""
# Places and furnishings, for prepositional phrases: they belong to no kind, so a sentence is only
# ever about its subject's kind.
PLACES = _pairs(
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
PEOPLE = _pairs(
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
GENERIC_VERBS = _pairs(
    "buy bought, sell sold, find found, keep kept, mention mentioned, describe described, choose chose, "
    "remember remembered, notice noticed, recommend recommended, discover discovered, "
    "photograph photographed, borrow borrowed, bring brought, show showed, share shared")
# Neutral descriptive adjectives (colour, material, shape, size, order, origin, ...): never
# evaluative, so they never carry sentiment or intensity. There are many so that no one of them is
# frequent enough for a probe to memorise it.
DESCRIPTIVE = tuple("""
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
PREPOSITIONS = tuple("to near behind beside in from by under above below inside outside across beyond past "
                      "along".split())
# Finite main verbs as (singular, plural). The plural of a linking verb is also its base form,
# the one used after "does not".
COPULAS = _pairs("is are, was were")
LINKING_VERBS = _pairs("seems seem, looks look, feels feel, sounds sound")
DO = ("does", "do")
CUES: tuple[tuple[str, ...], ...] = (("not",), ("never",), ("no", "longer"), ("hardly",))
NO = "no"
"""The determiner that negates a clause from its subject: "no keys to the shop are good"."""


def _graded(levels: Mapping[int, str]) -> dict[str, int]:
    return {word: strength for strength, words in levels.items() for word in words.split()}


# Evaluative adjectives with their strength: 1 mild, 2 clear, 3 extreme.
POSITIVE: Mapping[str, int] = _graded({
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
NEGATIVE: Mapping[str, int] = _graded({
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
INTENSIFIERS: Mapping[str, float] = {
    "slightly": 0.5, "somewhat": 0.6, "fairly": 0.75, "rather": 0.75, "quite": 1.25, "very": 1.5,
    "really": 1.5, "truly": 1.75, "extremely": 2.0, "incredibly": 2.0,
}
