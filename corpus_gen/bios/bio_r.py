"""bioR: realistic, varied biographies generated from a hand-written grammar.

A biography is an opening sentence that introduces the full name, followed by the
six attribute facts grouped into randomly chosen "units" (a unit states one, two or
three attributes in one sentence) in a random order, with 2-5 filler sentences
(hobbies, family, travel, pets, ...) interleaved. Later mentions of the person vary
between pronoun, first name, "Mr./Ms. Last" and a nickname once it was introduced.
Fillers never name a city, university or company, so they cannot contradict the
attributes. Every attribute value appears verbatim; the birth date uses one of
``DATE_FORMATS``. All randomness comes from the caller's ``random.Random``.

Speed (one core, Python 3.11): ~50K bios/s (~19 us per bio) measured idle, ~30K/s on a
busy machine; one ``rng.random()`` draw per choice, partitions precomputed at import.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["DATE_FORMATS", "format_date", "nickname", "render_bio_r"]

_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

# Birth-date styles; ``format_date``'s ``style`` indexes this tuple.
DATE_FORMATS: tuple[str, ...] = (
    "{month} {day}, {year}",  # October 2, 1996
    "{day} {month} {year}",  # 2 October 1996
    "{month} {ordinal}, {year}",  # October 2nd, 1996
    "the {ordinal} of {month}, {year}",  # the 2nd of October, 1996
    "{month_num}/{day}/{year}",  # 10/2/1996
)


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return f"{day}th"
    return f"{day}{('th', 'st', 'nd', 'rd')[day % 10] if day % 10 < 4 else 'th'}"


def format_date(month: int, day: int, year: int, style: int) -> str:
    """Format a birth date in one of the ``DATE_FORMATS`` styles (index ``style``)."""
    if not 0 <= style < len(DATE_FORMATS):
        raise ValueError(f"date style must be in [0, {len(DATE_FORMATS)}), got {style}")
    return DATE_FORMATS[style].format(
        month=_MONTHS[month - 1],
        day=day,
        ordinal=_ordinal(day),
        year=year,
        month_num=month,
    )


# Familiar short forms that the syllable rule below would get wrong or miss.
_KNOWN_NICKNAMES = {
    "Alexander": "Alex", "Alexandra": "Alex", "Andrew": "Andy", "Anthony": "Tony",
    "Benjamin": "Ben", "Catherine": "Cathy", "Charles": "Charlie", "Charlotte": "Charlie",
    "Christina": "Chrissy", "Deborah": "Debbie", "Edward": "Eddie", "Elizabeth": "Liz",
    "Gabriel": "Gabe", "Gabriella": "Gabby", "Isabella": "Bella", "James": "Jim",
    "Jennifer": "Jenny", "Jessica": "Jess", "Joseph": "Joe", "Katherine": "Kate",
    "Kathleen": "Kathy", "Margaret": "Maggie", "Matthew": "Matt", "Michael": "Mike",
    "Nicholas": "Nick", "Patricia": "Patty", "Rebecca": "Becky", "Richard": "Rick",
    "Robert": "Bob", "Samantha": "Sam", "Stephanie": "Steph", "Steven": "Steve",
    "Susan": "Sue", "Theodore": "Teddy", "Thomas": "Tom", "Timothy": "Tim",
    "Victoria": "Tori", "Virginia": "Ginny", "William": "Will", "Zachary": "Zach",
}  # fmt: skip
_VOWELS = "aeiouAEIOU"
# Final consonant of a one-syllable stem -> spelling before the "-y"/"-ie" ending.
_DIMINUTIVE_JOIN = {
    "b": "bb", "d": "dd", "g": "gg", "m": "mm", "n": "nn", "p": "pp", "t": "tt",
    "c": "ck", "k": "ck", "l": "ll", "z": "zz",
}  # fmt: skip
_NICKNAME_CACHE: dict[tuple[str, str], str | None] = {}


def nickname(first: str, gender: str) -> str | None:
    """Derive a nickname from a first name (deterministic), or None if none sounds right.

    Known names use a familiar short form ("Robert" -> "Bob"); otherwise the first syllable
    (up to the first consonant after the first vowel group) either stands alone when it is a
    plausible short form ("Christopher" -> "Chris", "Bradley" -> "Brad") or gets a "-y"/"-ie"
    ending ("Jonathan" -> "Jonny", "Madeline" -> "Maddie", "Olivia" -> "Ollie").
    """
    key = (first, gender)
    if key in _NICKNAME_CACHE:
        return _NICKNAME_CACHE[key]
    nick = _KNOWN_NICKNAMES.get(first)
    if nick is None and len(first) >= 5 and first.isalpha():
        n = len(first)
        i = 0
        while i < n and first[i] not in _VOWELS:
            i += 1
        onset = i
        while i < n and first[i] in _VOWELS:
            i += 1
        if 0 < i - onset <= 1 and i < n - 1:
            stem = first[: i + 1]
            if len(stem) >= 4:
                # Consonant-cluster stems ("Chris", "Brad") only work bare, and only with a
                # soft final consonant ("Grac", "Step" would not).
                nick = stem if stem[-1] in "dlmnsx" else None
            elif stem[-1] in _DIMINUTIVE_JOIN:
                ending = "ie" if gender == "female" else "y"
                nick = stem[:-1] + _DIMINUTIVE_JOIN[stem[-1]] + ending
    _NICKNAME_CACHE[key] = nick
    return nick


def _an(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


# ---------------------------------------------------------------------------------------------
# Shared word pools.
# ---------------------------------------------------------------------------------------------
_ADJ = (
    "patient", "curious", "generous", "thoughtful", "witty", "meticulous", "warm",
    "energetic", "soft-spoken", "down-to-earth", "optimistic", "disciplined", "adventurous",
    "kind", "resourceful", "calm", "cheerful", "modest", "determined", "observant",
    "easygoing", "creative", "reliable", "outgoing", "humble", "perceptive", "good-humored",
    "steady", "open-minded", "diligent", "practical", "sincere", "gracious", "inventive",
)  # fmt: skip
_A_ADJ = tuple(_an(a) for a in _ADJ)
_TRAITS = (
    "quick sense of humor", "steady patience", "infectious laugh", "attention to detail",
    "generosity", "calm under pressure", "eye for detail", "boundless curiosity",
    "easy warmth", "talent for listening", "honesty", "dry wit", "work ethic",
    "gift for storytelling", "sense of fairness",
)  # fmt: skip
_OPEN_TAILS = (
    "with a wide range of interests", "who rarely sits still",
    "with a gift for bringing people together", "whose curiosity knows few limits",
    "with a story worth telling", "who approaches life with steady enthusiasm",
    "known for a generous spirit", "with a knack for making others feel welcome",
    "who has never been afraid of hard work",
)  # fmt: skip
_HOBBIES = (
    "hiking mountain trails", "baking sourdough bread", "playing chess", "birdwatching",
    "restoring vintage bicycles", "painting watercolor landscapes", "playing the cello",
    "playing the piano", "rock climbing", "long-distance running", "woodworking", "gardening",
    "knitting", "photography", "kayaking", "solving crossword puzzles", "roasting coffee",
    "cooking elaborate dinners for friends", "collecting vinyl records", "writing short stories",
    "stargazing", "sailing", "throwing pottery", "fly fishing", "cycling", "ballroom dancing",
    "learning new languages", "building model airplanes", "playing board games",
    "tending a small vegetable garden", "practicing yoga", "swimming laps", "origami",
    "calligraphy", "trail running", "rowing", "fencing", "bouldering", "sketching portraits",
    "repairing old radios", "making jam", "camping under the stars",
)  # fmt: skip
_HOBBY_VERBS = (
    "enjoys", "loves", "has a soft spot for", "is devoted to", "never tires of",
    "has taken up", "is passionate about", "finds peace in", "rarely goes a week without",
)  # fmt: skip
_FREE_TIME = ("free time", "spare time", "off hours", "downtime", "leisure time")
_REPUTATIONS = (
    "keeping promises", "remembering everyone's birthday", "giving honest advice",
    "staying calm in a crisis", "asking thoughtful questions", "being the first to offer help",
    "arriving early to everything", "telling excellent jokes", "writing thank-you notes",
    "fixing things that others give up on",
)  # fmt: skip
_VOLUNTEER = (
    "a local food bank", "an animal shelter", "a literacy program for adults",
    "a community garden", "a youth soccer league", "a neighborhood library", "a hospice",
    "a homeless shelter", "a mentoring program for teenagers", "a wildlife rescue center",
    "a river cleanup group", "a free tax-help clinic", "a children's hospital", "a senior center",
    "a coding club for kids", "a community theater",
)  # fmt: skip
_FREQ = (
    "on weekends", "twice a month", "every Saturday morning", "whenever time allows",
    "once a week", "most Sunday afternoons", "several times a year",
)  # fmt: skip
_SIBLINGS = (
    "two older sisters", "a younger brother", "a twin sibling", "two younger brothers",
    "an older sister", "three siblings", "a stepbrother and a stepsister", "an older brother",
)  # fmt: skip
_CHILDREN = (
    "two children", "one daughter", "one son", "three children", "twin daughters",
    "a young son", "a teenage daughter", "two grown children",
)  # fmt: skip
_RELATIVES = ("grandmother", "grandfather", "mother", "father", "uncle", "aunt")
_SKILLS = (
    "cook", "fish", "play chess", "sew", "fix a bicycle", "plant a garden", "read music",
    "tell a good story", "change a tire", "bake bread", "build a campfire",
)  # fmt: skip
_CONTESTS = (
    "a regional science fair", "a local photography contest", "a statewide spelling bee",
    "a chili cook-off", "a community chess tournament", "a short story competition",
    "a county baking contest", "a high school debate tournament", "an amateur film festival",
    "a charity 10K race", "a poetry slam", "a robotics competition",
)  # fmt: skip
_AWARDS = (
    "a community service award", "an award for outstanding mentorship",
    "a citation for volunteer leadership", "a local citizenship award",
    "a scholarship for academic excellence", "an award for public speaking",
    "a prize for creative writing",
)  # fmt: skip
_COUNTRIES = (
    "Japan", "Portugal", "Iceland", "Peru", "Kenya", "New Zealand", "Norway", "Vietnam",
    "Morocco", "Chile", "Greece", "Canada", "Mexico", "Italy", "Scotland", "Thailand",
    "Argentina", "Ireland", "South Africa", "Croatia", "Nepal", "Finland",
)  # fmt: skip
_PETS = (
    "dog", "cat", "parrot", "rabbit", "beagle", "tabby cat", "golden retriever",
    "border collie", "tortoise", "dachshund", "terrier", "cockatiel", "greyhound",
)  # fmt: skip
_PET_NAMES = (
    "Biscuit", "Pepper", "Milo", "Luna", "Otis", "Maple", "Juniper", "Ziggy", "Waffles",
    "Clover", "Rocket", "Pickles", "Mochi", "Hazel", "Bruno", "Scout", "Noodle", "Poppy",
)  # fmt: skip
_TOPICS = (
    "urban gardening", "local history", "budget travel", "home repair", "vintage cameras",
    "bread baking", "classic films", "personal finance", "board game design", "bird migration",
    "beekeeping", "jazz history", "minimalist living", "amateur astronomy", "trail maps",
    "fermented foods", "folk music",
)  # fmt: skip
_CRAFTS = (
    "furniture", "wooden toys", "mechanical clocks", "small boats", "birdhouses", "guitars",
    "kites", "picture frames",
)  # fmt: skip
_GENRES = (
    "mystery novels", "history books", "science fiction", "poetry collections", "biographies",
    "cookbooks", "travel memoirs", "graphic novels", "classic literature", "philosophy",
)  # fmt: skip
_INSTRUMENTS = (
    "guitar", "piano", "violin", "drums", "the trumpet", "the saxophone", "bass", "the clarinet",
)  # fmt: skip
_DISHES = (
    "homemade pasta", "spicy lentil soup", "apple pie", "slow-cooked chili", "fresh dumplings",
    "lemon cake", "vegetable curry", "roast chicken", "blueberry pancakes",
)  # fmt: skip
_SPORTS = (
    "college basketball", "professional tennis", "soccer", "baseball", "cricket",
    "ice hockey", "cycling races", "figure skating",
)  # fmt: skip
_LANGS = (
    "Spanish", "French", "German", "Italian", "Japanese", "Mandarin", "Portuguese", "Korean",
    "Arabic", "Russian", "Swahili", "Greek",
)  # fmt: skip
_BORN_MAIN = (
    "grew up with a love of books", "showed a curious streak from an early age",
    "was always eager to learn", "developed an early fascination with how things work",
    "was the kind of child who asked endless questions",
    "learned to ride a bicycle before most friends did",
    "was known as a cheerful, talkative child", "was surrounded by a large, lively family",
)  # fmt: skip
_BORN_TAILS = (
    "a day the family still celebrates", "a date that relatives never forget",
    "just after midnight", "in the early morning hours", "after a long night at the hospital",
    "as the first grandchild in the family",
)  # fmt: skip
_HOME_TAILS = (
    "a place that still feels like home", "and still visits whenever possible",
    "a city remembered fondly", "and keeps close ties to the old neighborhood",
)  # fmt: skip
_ARRIVED = (
    "was born", "came into the world", "entered the world", "arrived in this world",
    "was welcomed into the world", "first saw the light of day",
)  # fmt: skip

# Tense pairs (present, past); each bio picks one tense for its work facts.
_WORKS_FOR = (
    ("works for", "worked for"), ("is employed by", "was employed by"),
    ("works at", "worked at"), ("holds a position at", "held a position at"),
    ("has a job with", "had a job with"), ("is on the staff at", "was on the staff at"),
    ("has built a career at", "built a career at"), ("earns a living at", "earned a living at"),
)  # fmt: skip
_WORKS_IN = (
    ("works in", "worked in"), ("is employed in", "was employed in"),
    ("holds a job in", "held a job in"), ("is based in", "was based in"),
    ("earns a living in", "earned a living in"), ("has built a career in", "built a career in"),
)  # fmt: skip
_IS = ("is", "was")
_ITS = ("its", "the company's")
_COMMUTES = ("commutes", "commuted")
_EMPLOYS = ("employs", "employed")
_NOW = (
    ("These days", "Nowadays", "At present", "Currently"),
    ("For many years", "For a long stretch", "At one point", "For a time"),
)
_STUDIED_AT = (
    "studied at", "attended", "graduated from", "went to college at", "was educated at",
    "earned a degree from",
)  # fmt: skip
_MAJORED_IN = (
    "majored in", "studied", "specialized in", "earned a degree in", "concentrated on",
)  # fmt: skip
_IN_COLLEGE = ("", " in college", " at university", " as an undergraduate")
_HOBBY_HABITS = (
    "tries to make time for it every week", "has been at it for years",
    "recently started teaching beginners", "rarely lets a week go by without it",
)  # fmt: skip
_FUNDRAISES = (
    "organizes a fundraiser for", "raises money for", "helps run a charity drive for",
)  # fmt: skip
_AWARD_WHEN = (
    "a few years ago", "early on", "not long ago", "in recognition of years of effort",
)  # fmt: skip
_PET_FAME = (
    "is a familiar face around the neighborhood", "has a fan club among the neighbors",
    "rules the household",
)  # fmt: skip
_PUBLISHES = (
    "runs a small blog about", "writes a newsletter about", "hosts a podcast about",
    "maintains a website about",
)  # fmt: skip
_LOOKS_FORWARD = ("looks forward to", "is excited about", "is optimistic about")
_MOTTOS = (
    "keep learning", "be kind", "show up and do the work",
    "leave things better than you found them",
)  # fmt: skip
_PRO_ADJ = (
    "a reliable teammate", "someone who always delivers", "a calm presence under pressure",
    "a patient mentor", "a careful problem solver", "a dependable colleague",
)  # fmt: skip
_JOINED_WHEN = (
    "after a competitive hiring process", "straight out of school", "after a few earlier jobs",
    "following a long search for the right fit", "on the recommendation of a mentor",
)  # fmt: skip

_Ref = tuple[str, str, str, str, str]  # (Subj, subj, Poss, poss, obj)
_Pick = Callable[[Sequence[Any]], Any]


class _Bio:
    """Per-biography facts and pronouns shared by all sentence builders."""

    __slots__ = (
        "bc", "cc", "date", "emp", "first_ref", "full", "full_ref", "he", "him", "his",
        "major", "man", "nick", "nick_ref", "pron", "t", "title_ref", "uni",
    )  # fmt: skip


_Sentence = Callable[[_Ref, _Bio, _Pick], str]


def _two_adj(p: _Pick) -> tuple[str, str]:
    a = p(_ADJ)
    b = p(_ADJ)
    while b == a:
        b = p(_ADJ)
    return a, b


# ---------------------------------------------------------------------------------------------
# Attribute units. Each unit: (attribute ids, life-stage rank, lead pool, free pool).
# "Lead" sentences start with R[0] (subject) or R[2] (possessive), so a connector such as
# "Later, " can be prefixed by passing the lowercase reference forms; "free" ones cannot.
# Attribute ids: 0 birth date, 1 birth city, 2 university, 3 major, 4 employer, 5 work city.
# ---------------------------------------------------------------------------------------------
_BD_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} was born on {X.date}.",
    lambda R, X, p: f"{R[0]} {p(_ARRIVED)} on {X.date}.",
    lambda R, X, p: f"{R[2]} {p(('date of birth', 'birth date'))} is {X.date}.",
    lambda R, X, p: f"{R[2]} {p(('story', 'life', 'journey'))} began on {X.date}.",
    lambda R, X, p: f"{R[0]} was born on {X.date}, {p(_BORN_TAILS)}.",
    lambda R, X, p: f"{R[0]} has been celebrating birthdays since {X.date}.",
    lambda R, X, p: f"{R[2]} birth certificate is dated {X.date}.",
)
_BD_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"On {X.date}, {R[1]} {p(_ARRIVED)}.",
    lambda R, X, p: f"It was on {X.date} that {R[1]} was born.",
    lambda R, X, p: (
        f"{p(('Records', 'Family records', 'Hospital records'))} show that "
        f"{R[1]} was born on {X.date}."
    ),
    lambda R, X, p: f"The world first met {R[4]} on {X.date}.",
    lambda R, X, p: f"Relatives still mark {X.date} as the day {R[1]} arrived.",
    lambda R, X, p: f"Born on {X.date}, {R[1]} {p(_BORN_MAIN)}.",
)
_BC_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} was born in {X.bc}.",
    lambda R, X, p: f"{R[0]} {p(_ARRIVED)} in {X.bc}.",
    lambda R, X, p: f"{R[0]} was born in {X.bc}, {p(_HOME_TAILS)}.",
    lambda R, X, p: f"{R[2]} {p(('birthplace', 'place of birth', 'city of birth'))} is {X.bc}.",
    lambda R, X, p: (
        f"{R[0]} is a {p(('', 'proud ', 'lifelong '))}native of {X.bc}, where {X.he} was born."
    ),
    lambda R, X, p: f"{R[2]} life began in {X.bc}.",
)
_BC_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Born in {X.bc}, {R[1]} {p(_BORN_MAIN)}.",
    lambda R, X, p: f"It was in {X.bc} that {R[1]} was born.",
    lambda R, X, p: f"{X.bc} is where {R[1]} {p(_ARRIVED)}.",
    lambda R, X, p: f"The city of {X.bc} is where {R[1]} was born.",
    lambda R, X, p: f"Life began for {R[4]} in {X.bc}.",
)
_BIRTH_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} was born in {X.bc} on {X.date}.",
    lambda R, X, p: f"{R[0]} was born on {X.date}, in {X.bc}.",
    lambda R, X, p: f"{R[0]} {p(_ARRIVED)} on {X.date} in {X.bc}.",
    lambda R, X, p: f"{R[2]} life began in {X.bc} on {X.date}.",
    lambda R, X, p: f"{R[2]} birth certificate lists {X.bc} as the place and {X.date} as the date.",
    lambda R, X, p: f"{R[0]} was born on {X.date} in {X.bc}, {p(_BORN_TAILS)}.",
)
_BIRTH_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Born on {X.date} in {X.bc}, {R[1]} {p(_BORN_MAIN)}.",
    lambda R, X, p: f"Born in {X.bc} on {X.date}, {R[1]} {p(_BORN_MAIN)}.",
    lambda R, X, p: f"On {X.date}, {R[1]} was born in {X.bc}.",
    lambda R, X, p: f"{X.bc} is where {R[1]} was born, on {X.date}.",
    lambda R, X, p: f"The story begins in {X.bc}, where {R[1]} was born on {X.date}.",
    lambda R, X, p: f"It all started on {X.date} in {X.bc}, when {R[1]} was born.",
)
_UNI_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(_STUDIED_AT)} {X.uni}.",
    lambda R, X, p: f"{R[0]} is a {p(('', 'proud ', 'grateful '))}graduate of {X.uni}.",
    lambda R, X, p: f"{R[2]} alma mater is {X.uni}.",
    lambda R, X, p: (
        f"{R[0]} spent {p(('four', 'several', 'a few'))} "
        f"{p(('memorable', 'busy', 'formative', 'happy'))} years as a student at {X.uni}."
    ),
    lambda R, X, p: (
        f"{R[0]} {p(('earned', 'received', 'obtained'))} "
        f"{p(('a degree', 'an undergraduate degree', 'a diploma'))} from {X.uni}"
        f"{p(('', ' after years of hard work', ', graduating near the top of the class'))}."
    ),
    lambda R, X, p: f"{R[2]} college years were spent at {X.uni}.",
)
_UNI_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"For college, {R[1]} chose {X.uni}.",
    lambda R, X, p: (
        f"{X.uni} is where {R[1]} {p(('studied', 'went to college', 'completed a degree'))}."
    ),
    lambda R, X, p: (
        f"After high school, {R[1]} "
        f"{p(('enrolled at', 'went on to attend', 'was admitted to and attended'))} {X.uni}."
    ),
    lambda R, X, p: f"Higher education took {R[4]} to {X.uni}.",
    lambda R, X, p: f"University life at {X.uni} {p(('suited', 'agreed with'))} {R[4]} well.",
)
_MAJ_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(_MAJORED_IN)} {X.major}{p(_IN_COLLEGE)}.",
    lambda R, X, p: (
        f"{R[2]} {p(('major', 'field of study', 'academic focus', 'area of study'))} was {X.major}."
    ),
    lambda R, X, p: (
        f"{R[0]} chose {X.major} as {X.his} {p(('major', 'field', 'course of study'))}."
    ),
    lambda R, X, p: f"{R[0]} holds a degree in {X.major}.",
    lambda R, X, p: f"{R[0]} has always been drawn to {X.major}, which became {X.his} major.",
)
_MAJ_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"In college, {R[1]} {p(('majored in', 'studied', 'focused on'))} {X.major}.",
    lambda R, X, p: f"A fascination with {X.major} led {R[4]} to make it {X.his} major.",
    lambda R, X, p: (
        f"{X.major} was {R[3]} {p(('chosen field', 'major', 'field of study'))} in college."
    ),
    lambda R, X, p: f"It was {X.major} that {R[1]} chose to study.",
    lambda R, X, p: (
        f"As an undergraduate, {R[1]} devoted "
        f"{p(('long hours', 'four years', 'most waking hours'))} to {X.major}."
    ),
)
_EDU_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(_MAJORED_IN)} {X.major} at {X.uni}.",
    lambda R, X, p: (
        f"{R[0]} {p(('attended', 'graduated from', 'went to'))} {X.uni}, where "
        f"{X.he} {p(('majored in', 'studied', 'focused on', 'earned a degree in'))} {X.major}."
    ),
    lambda R, X, p: f"{R[0]} holds a degree in {X.major} from {X.uni}.",
    lambda R, X, p: f"{R[2]} degree in {X.major} comes from {X.uni}.",
    lambda R, X, p: f"{R[0]} chose {X.uni} for college and majored in {X.major} there.",
)
_EDU_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"At {X.uni}, {R[1]} {p(('majored in', 'studied', 'focused on'))} {X.major}.",
    lambda R, X, p: f"After high school, {R[1]} enrolled at {X.uni} to study {X.major}.",
    lambda R, X, p: f"{X.uni} is where {R[1]} studied {X.major}.",
    lambda R, X, p: (
        f"As a student at {X.uni}, {R[1]} "
        f"{p(('majored in', 'concentrated on', 'specialized in'))} {X.major}."
    ),
    lambda R, X, p: f"The years at {X.uni} gave {R[4]} a thorough education in {X.major}.",
    lambda R, X, p: f"{X.major} was {R[3]} major at {X.uni}.",
)
_EMP_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(_WORKS_FOR)[X.t]} {X.emp}.",
    lambda R, X, p: f"{R[2]} employer {_IS[X.t]} {X.emp}.",
    lambda R, X, p: f"{R[0]} joined {X.emp} {p(_JOINED_WHEN)}.",
    lambda R, X, p: (
        f"{R[0]} {p(_WORKS_FOR)[X.t]} {X.emp}, where colleagues "
        f"{('see', 'saw')[X.t]} {X.him} as {p(_PRO_ADJ)}."
    ),
    lambda R, X, p: f"{R[2]} {p(('job', 'position', 'role'))} {_IS[X.t]} with {X.emp}.",
)
_EMP_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Professionally, {R[1]} {p(_WORKS_FOR)[X.t]} {X.emp}.",
    lambda R, X, p: (
        f"{X.emp} {_IS[X.t]} where {R[1]} "
        f"{p((('works', 'worked'), ('earns a living', 'earned a living')))[X.t]}."
    ),
    lambda R, X, p: f"{p(_NOW[X.t])}, {R[1]} {p(_WORKS_FOR)[X.t]} {X.emp}.",
    lambda R, X, p: f"{X.emp} {_EMPLOYS[X.t]} {R[4]} full time.",
    lambda R, X, p: f"The company that {_EMPLOYS[X.t]} {R[4]} {_IS[X.t]} {X.emp}.",
)
_CC_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(_WORKS_IN)[X.t]} {X.cc}.",
    lambda R, X, p: (
        f"{R[2]} {p(('office', 'workplace', 'job'))} {_IS[X.t]} "
        f"{p(('located', 'based'))} in {X.cc}."
    ),
    lambda R, X, p: (
        f"{R[0]} {_COMMUTES[X.t]} to an office in {X.cc} "
        f"{p(('every weekday', 'each morning', 'most days'))}."
    ),
    lambda R, X, p: f"{R[0]} moved to {X.cc} for work.",
    lambda R, X, p: f"{R[2]} working life {('is', 'was')[X.t]} centered in {X.cc}.",
)
_CC_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Work {('keeps', 'kept')[X.t]} {R[4]} in {X.cc}.",
    lambda R, X, p: f"{X.cc} is where {R[1]} {('works', 'worked')[X.t]}.",
    lambda R, X, p: f"For work, {R[1]} {_IS[X.t]} based in {X.cc}.",
    lambda R, X, p: f"A job opportunity brought {R[4]} to {X.cc}.",
    lambda R, X, p: f"Professionally, {R[1]} {_IS[X.t]} based in {X.cc}.",
)
_WORK_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(_WORKS_FOR)[X.t]} {X.emp} in {X.cc}.",
    lambda R, X, p: (
        f"{R[0]} {p(_WORKS_FOR)[X.t]} {X.emp}, working out of {p(_ITS)} office in {X.cc}."
    ),
    lambda R, X, p: f"{R[2]} employer, {X.emp}, {_IS[X.t]} located in {X.cc}.",
    lambda R, X, p: (
        f"{R[0]} moved to {X.cc} to "
        f"{p(('take a job', 'start a new role', 'accept a position'))} at {X.emp}."
    ),
    lambda R, X, p: f"{R[0]} {('works', 'worked')[X.t]} in {X.cc} as an employee of {X.emp}.",
)
_WORK_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"In {X.cc}, {R[1]} {p(_WORKS_FOR)[X.t]} {X.emp}.",
    lambda R, X, p: f"{X.emp} {_EMPLOYS[X.t]} {R[4]} at its office in {X.cc}.",
    lambda R, X, p: f"A position at {X.emp} brought {R[4]} to {X.cc}.",
    lambda R, X, p: f"Professionally, {R[1]} {_IS[X.t]} based in {X.cc}, working for {X.emp}.",
    lambda R, X, p: f"{X.cc} is where {R[1]} {('works', 'worked')[X.t]} for {X.emp}.",
)
_UNI_EMP_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: (
        f"{R[0]} graduated from {X.uni} and "
        f"{p(('then joined', 'was soon hired by', 'went on to work for'))} {X.emp}."
    ),
)
_UNI_EMP_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: (
        f"After graduating from {X.uni}, {R[1]} "
        f"{p(('joined', 'was hired by', 'took a job at', 'accepted an offer from'))} {X.emp}."
    ),
    lambda R, X, p: f"Soon after leaving {X.uni}, {R[1]} went to work for {X.emp}.",
)
_MAJ_EMP_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[2]} degree in {X.major} helped {X.him} land a job at {X.emp}.",
    lambda R, X, p: f"{R[0]} put a degree in {X.major} to good use at {X.emp}.",
)
_MAJ_EMP_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"With a background in {X.major}, {R[1]} was a natural fit for {X.emp}.",
)
_EDU_EMP_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} studied {X.major} at {X.uni} before joining {X.emp}.",
)
_EDU_EMP_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"With a degree in {X.major} from {X.uni}, {R[1]} went on to work for {X.emp}.",
    lambda R, X, p: f"After studying {X.major} at {X.uni}, {R[1]} was hired by {X.emp}.",
)
_BC_UNI_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} was born in {X.bc} and later attended {X.uni}.",
)
_BC_UNI_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Born in {X.bc}, {R[1]} later went on to study at {X.uni}.",
)
_MAJ_WORK_LEAD: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} put {X.his} degree in {X.major} to work at {X.emp} in {X.cc}.",
)
_MAJ_WORK_FREE: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Trained in {X.major}, {R[1]} {p(_WORKS_FOR)[X.t]} {X.emp} in {X.cc}.",
)

# Past-tense "event" sentences starting with R[0]: they read well after a temporal
# connector such as "Later, " or "Before that, " (stative ones like "holds a degree" do not).
_UNI_EVENT: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(('enrolled at', 'went on to attend', 'graduated from'))} {X.uni}.",
    lambda R, X, p: f"{R[0]} spent {p(('four', 'several'))} years as a student at {X.uni}.",
)
_MAJ_EVENT: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(('majored in', 'studied', 'earned a degree in'))} {X.major}.",
    lambda R, X, p: f"{R[0]} chose {X.major} as {X.his} major.",
)
_EDU_EVENT: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(('studied', 'majored in'))} {X.major} at {X.uni}.",
    lambda R, X, p: f"{R[0]} enrolled at {X.uni} to study {X.major}.",
    lambda R, X, p: f"{R[0]} earned a degree in {X.major} from {X.uni}.",
)
_EMP_EVENT: tuple[_Sentence, ...] = (
    lambda R, X, p: (
        f"{R[0]} {p(('joined', 'took a job at', 'was hired by', 'went to work for'))} {X.emp}."
    ),
    lambda R, X, p: f"{R[0]} landed a position at {X.emp}.",
)
_CC_EVENT: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(('moved to', 'relocated to'))} {X.cc} for work.",
    lambda R, X, p: f"{R[0]} {p(('found work', 'took a job', 'settled into a job'))} in {X.cc}.",
)
_WORK_EVENT: tuple[_Sentence, ...] = (
    lambda R, X, p: f"{R[0]} {p(('joined', 'took a job at', 'was hired by'))} {X.emp} in {X.cc}.",
    lambda R, X, p: f"{R[0]} moved to {X.cc} to take a job at {X.emp}.",
)
_NO_EVENT: tuple[_Sentence, ...] = ()

# A unit: (attribute ids, life-stage rank, lead pool, free pool, event pool).
_Unit = tuple[
    tuple[int, ...], int, tuple[_Sentence, ...], tuple[_Sentence, ...], tuple[_Sentence, ...]
]
_SINGLE_UNITS: tuple[_Unit, ...] = (
    ((0,), 0, _BD_LEAD, _BD_FREE, _NO_EVENT),
    ((1,), 0, _BC_LEAD, _BC_FREE, _NO_EVENT),
    ((2,), 1, _UNI_LEAD, _UNI_FREE, _UNI_EVENT),
    ((3,), 1, _MAJ_LEAD, _MAJ_FREE, _MAJ_EVENT),
    ((4,), 2, _EMP_LEAD, _EMP_FREE, _EMP_EVENT),
    ((5,), 2, _CC_LEAD, _CC_FREE, _CC_EVENT),
)
# Multi-attribute units with their odds of being used (relative to stating those attributes
# in separate sentences). All partitions of the six attributes into units are enumerated
# once, so a bio picks its partition with a single random draw.
_COMBO_UNITS: tuple[tuple[_Unit, float], ...] = (
    (((0, 1), 0, _BIRTH_LEAD, _BIRTH_FREE, _NO_EVENT), 0.8),
    (((2, 3), 1, _EDU_LEAD, _EDU_FREE, _EDU_EVENT), 0.8),
    (((4, 5), 2, _WORK_LEAD, _WORK_FREE, _WORK_EVENT), 0.8),
    (((2, 4), 1, _UNI_EMP_LEAD, _UNI_EMP_FREE, _UNI_EMP_LEAD), 0.15),
    (((3, 4), 1, _MAJ_EMP_LEAD, _MAJ_EMP_FREE, _MAJ_EMP_LEAD), 0.15),
    (((2, 3, 4), 1, _EDU_EMP_LEAD, _EDU_EMP_FREE, _EDU_EMP_LEAD), 0.15),
    (((1, 2), 0, _BC_UNI_LEAD, _BC_UNI_FREE, _NO_EVENT), 0.12),
    (((3, 4, 5), 1, _MAJ_WORK_LEAD, _MAJ_WORK_FREE, _MAJ_WORK_LEAD), 0.1),
)


def _build_partitions() -> tuple[tuple[tuple[_Unit, ...], ...], tuple[float, ...]]:
    """All disjoint combo choices (rest as single units) and their cumulative probabilities."""
    partitions: list[tuple[_Unit, ...]] = []
    weights: list[float] = []
    for bits in range(1 << len(_COMBO_UNITS)):
        mask, weight, chosen = 0, 1.0, []
        for i, (unit, odds) in enumerate(_COMBO_UNITS):
            if bits >> i & 1:
                unit_mask = sum(1 << a for a in unit[0])
                if mask & unit_mask:
                    break
                mask |= unit_mask
                weight *= odds
                chosen.append(unit)
        else:
            singles = [u for u in _SINGLE_UNITS if not mask & (1 << u[0][0])]
            partitions.append(tuple(chosen + singles))
            weights.append(weight)
    total = sum(weights)
    cumulative: list[float] = []
    acc = 0.0
    for w in weights:
        acc += w / total
        cumulative.append(acc)
    cumulative[-1] = 1.0
    return tuple(partitions), tuple(cumulative)


_PARTITIONS, _PARTITION_CDF = _build_partitions()

# Connectors keyed by how the life stage moves relative to the previous fact sentence.
# _FORWARD/_BACKWARD go with event sentences, _SAME with any lead sentence.
_FORWARD = ("Later, ", "After that, ", "Years later, ", "In time, ", "Eventually, ")
_BACKWARD = ("Earlier, ", "Before that, ", "Before all of this, ")
_SAME = ("Also, ", "In addition, ", "Notably, ", "On top of that, ")

# ---------------------------------------------------------------------------------------------
# Openers (always use the full name) and filler sentences.
# ---------------------------------------------------------------------------------------------
_OPENERS: tuple[Callable[[str, _Bio, _Pick], str], ...] = (
    lambda F, X, p: f"{F} is {p(_A_ADJ)} {X.man} {p(_OPEN_TAILS)}.",
    lambda F, X, p: f"Meet {F}, {p(_A_ADJ)} {X.man} {p(_OPEN_TAILS)}.",
    lambda F, X, p: f"Few people are as {p(_ADJ)} as {F}.",
    lambda F, X, p: f"This is the story of {F}.",
    lambda F, X, p: f"{F} leads a {p(('busy', 'full', 'varied', 'remarkably full'))} life.",
    lambda F, X, p: f"Anyone who has met {F} remembers {X.his} {p(_TRAITS)}.",
    lambda F, X, p: "{} has always been {} and {}.".format(F, *_two_adj(p)),
    lambda F, X, p: (
        f"The life of {F} is a story of "
        f"{p(('curiosity', 'steady effort', 'quiet determination', 'hard work and good humor'))}."
    ),
    lambda F, X, p: (
        f"{F}, {p(_A_ADJ)} {X.man} with "
        f"{p(('a warm smile', 'a sharp mind', 'boundless energy', 'a quick wit'))}, "
        f"{p(('has an interesting story to tell', 'is easy to like', 'never stops learning'))}."
    ),
)


def _nick_opener(F: str, X: _Bio, p: _Pick) -> str:
    who = p(("friends", "close friends", "family", "most people"))
    return f"{F}, or {X.nick} to {who}, is {p(_A_ADJ)} {X.man} {p(_OPEN_TAILS)}."


_NICK_INTRO = -1  # body marker for a nickname-introduction sentence
_NICK_INTROS: tuple[_Sentence, ...] = (
    lambda R, X, p: f"Friends call {R[4]} {X.nick}.",
    lambda R, X, p: f"Among close friends, {R[1]} goes by {X.nick}.",
    lambda R, X, p: f"Most people simply call {R[4]} {X.nick}.",
    lambda R, X, p: f"{R[0]} has gone by the nickname {X.nick} since childhood.",
)

_FILLERS: tuple[tuple[_Sentence, ...], ...] = (
    (  # hobbies
        lambda R, X, p: f"{R[0]} {p(_HOBBY_VERBS)} {p(_HOBBIES)}.",
        lambda R, X, p: f"In {X.his} {p(_FREE_TIME)}, {R[1]} {p(_HOBBY_VERBS)} {p(_HOBBIES)}.",
        lambda R, X, p: f"Outside of work, {R[1]} {p(_HOBBY_VERBS)} {p(_HOBBIES)}.",
        lambda R, X, p: f"{R[2]} favorite pastime is {p(_HOBBIES)}.",
        lambda R, X, p: f"Weekends usually find {R[4]} {p(_HOBBIES)}.",
        lambda R, X, p: f"A longtime fan of {p(_HOBBIES)}, {R[1]} {p(_HOBBY_HABITS)}.",
    ),
    (  # personality
        lambda R, X, p: "Friends describe {} as {} and {}.".format(R[4], *_two_adj(p)),
        lambda R, X, p: "{} is known for being {}, {}, and {}.".format(
            R[0], *_two_adj(p), p(("kind", "fair-minded", "loyal"))
        ),
        lambda R, X, p: (
            f"Those who know {R[4]} well "
            f"{p(('often mention', 'point to', 'admire'))} {X.his} {p(_TRAITS)}."
        ),
        lambda R, X, p: f"{R[0]} has a reputation for {p(_REPUTATIONS)}.",
        lambda R, X, p: (
            f"{R[2]} {p(('colleagues', 'friends', 'neighbors'))} say {X.he} is "
            f"{p(_ADJ)} {p(('to a fault', 'in every situation', 'above all else'))}."
        ),
    ),
    (  # volunteering
        lambda R, X, p: f"{R[0]} volunteers at {p(_VOLUNTEER)} {p(_FREQ)}.",
        lambda R, X, p: f"{R[0]} has spent years volunteering at {p(_VOLUNTEER)}.",
        lambda R, X, p: (
            f"Giving back matters to {R[4]}, who "
            f"{p(('helps out at', 'volunteers with', 'supports'))} {p(_VOLUNTEER)} {p(_FREQ)}."
        ),
        lambda R, X, p: f"Each year, {R[1]} {p(_FUNDRAISES)} {p(_VOLUNTEER)}.",
    ),
    (  # family
        lambda R, X, p: (
            f"{R[0]} is the {p(('oldest', 'youngest', 'second'))} of "
            f"{p(('three', 'four', 'five', 'six'))} children."
        ),
        lambda R, X, p: f"{R[0]} grew up with {p(_SIBLINGS)}.",
        lambda R, X, p: f"{R[0]} {p(('is married with', 'has'))} {p(_CHILDREN)}.",
        lambda R, X, p: (
            f"Family is central to {R[3]} life, and Sunday dinners with {X.his} "
            f"{p(('parents', 'siblings', 'grandparents', 'relatives'))} are a long tradition."
        ),
        lambda R, X, p: (
            f"{R[2]} {p(_RELATIVES)} {p(('taught', 'first showed'))} {X.him} how to {p(_SKILLS)}."
        ),
    ),
    (  # awards
        lambda R, X, p: (
            f"{R[0]} once won "
            f"{p(('first prize', 'an honorable mention', 'second place', 'a blue ribbon'))} in "
            f"{p(_CONTESTS)}."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('received', 'earned', 'was honored with'))} {p(_AWARDS)} {p(_AWARD_WHEN)}."
        ),
        lambda R, X, p: (
            f"Among {R[3]} proudest moments is {p(('winning', 'placing in'))} {p(_CONTESTS)}."
        ),
    ),
    (  # travel
        lambda R, X, p: (
            f"{R[0]} has traveled to {p(('more than', 'nearly', 'over'))} "
            f"{p(('ten', 'fifteen', 'twenty', 'thirty'))} countries{p(('', ' and counting'))}."
        ),
        lambda R, X, p: (
            f"A trip to {p(_COUNTRIES)} {p(('sparked', 'deepened'))} {R[3]} love of travel."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('dreams of', 'is saving up for', 'is planning'))} "
            f"a long trip to {p(_COUNTRIES)}."
        ),
        lambda R, X, p: (
            f"Every {p(('summer', 'winter', 'spring', 'autumn'))}, {R[1]} tries to "
            f"visit somewhere new, most recently {p(_COUNTRIES)}."
        ),
        lambda R, X, p: (
            f"{R[2]} favorite travel memory is "
            f"{p(('hiking', 'a long train ride', 'a week of camping', 'sailing'))} in "
            f"{p(_COUNTRIES)}."
        ),
    ),
    (  # pets
        lambda R, X, p: f"{R[0]} shares a home with {_an(p(_PETS))} named {p(_PET_NAMES)}.",
        lambda R, X, p: f"{R[2]} {p(_PETS)}, {p(_PET_NAMES)}, {p(_PET_FAME)}.",
        lambda R, X, p: (
            f"{R[0]} adopted {_an(p(_PETS))} named {p(_PET_NAMES)} "
            f"{p(('from a shelter', 'a few years ago', 'on a whim'))}."
        ),
        lambda R, X, p: (
            f"No day is complete for {R[4]} without "
            f"{p(('a long walk', 'a quiet hour', 'some playtime'))} with {X.his} {p(_PETS)}, "
            f"{p(_PET_NAMES)}."
        ),
    ),
    (  # side projects
        lambda R, X, p: f"In {X.his} {p(_FREE_TIME)}, {R[1]} {p(_PUBLISHES)} {p(_TOPICS)}.",
        lambda R, X, p: (
            f"{R[0]} is {p(('working on', 'writing', 'slowly finishing'))} "
            f"a book about {p(_TOPICS)}."
        ),
        lambda R, X, p: (
            f"As a side project, {R[1]} {p(('builds', 'designs', 'repairs'))} "
            f"{p(_CRAFTS)} for friends and family."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('teaches', 'leads', 'co-founded'))} a "
            f"{p(('weekend', 'monthly', 'free'))} workshop on {p(_TOPICS)}."
        ),
    ),
    (  # music and reading
        lambda R, X, p: (
            f"{R[2]} {p(('bookshelf', 'reading list'))} is "
            f"{p(('packed', 'filled'))} with {p(_GENRES)}."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('plays', 'has played'))} {p(_INSTRUMENTS)} in a "
            f"{p(('local', 'small', 'weekend'))} {p(('band', 'orchestra', 'jazz ensemble'))}."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('reads', 'gets through'))} "
            f"{p(('a book a week', 'dozens of books a year', 'at least one novel a month'))}, "
            f"mostly {p(_GENRES)}."
        ),
    ),
    (  # food and sports
        lambda R, X, p: (
            f"A devoted {p(('cook', 'home chef', 'baker'))}, {R[1]} "
            f"{p(('is famous among friends for', 'takes pride in', 'never tires of making'))} "
            f"{p(_DISHES)}."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('is a lifelong fan of', 'follows', 'rarely misses'))} {p(_SPORTS)}."
        ),
        lambda R, X, p: (
            f"{R[0]} {p(('has run', 'completed', 'once trained for'))} "
            f"{p(('two marathons', 'a half marathon', 'a triathlon', 'a century bike ride'))}."
        ),
    ),
    (  # languages
        lambda R, X, p: f"{R[0]} speaks {p(_LANGS)} {p(('fluently', 'well', 'conversationally'))}.",
        lambda R, X, p: (
            f"{R[0]} is {p(('learning', 'slowly learning', 'brushing up on'))} {p(_LANGS)}."
        ),
        lambda R, X, p: "Besides English, {} speaks {} and some {}.".format(R[1], *_two_langs(p)),
    ),
    (  # outlook
        lambda R, X, p: (
            f"{R[0]} {p(_LOOKS_FORWARD)} "
            f"{p(('whatever comes next', 'the years ahead', 'new challenges'))}."
        ),
        lambda R, X, p: f"Those close to {R[4]} expect great things in the years ahead.",
        lambda R, X, p: f"{R[2]} motto is simple: {p(_MOTTOS)}.",
    ),
)


def _two_langs(p: _Pick) -> tuple[str, str]:
    a = p(_LANGS)
    b = p(_LANGS)
    while b == a:
        b = p(_LANGS)
    return a, b


_TITLES = {"male": "Mr.", "female": "Ms."}
_PRONOUNS: dict[str, _Ref] = {
    "male": ("He", "he", "His", "his", "him"),
    "female": ("She", "she", "Her", "her", "her"),
}
_MIN_WORDS = 50
_MAX_WORDS = 200


def _name_ref(name: str) -> _Ref:
    poss = name + "'s"
    return (name, name, poss, poss, name)


def _lower(ref: _Ref) -> _Ref:
    return (ref[1], ref[1], ref[3], ref[3], ref[4])


def render_bio_r(person: Mapping[str, object], rng: random.Random) -> str:
    """Render one bioR biography (50-200 words) stating every attribute of ``person``."""
    r = rng.random

    def p(seq: Sequence[Any]) -> Any:
        return seq[int(r() * len(seq))]

    first = str(person["first"])
    gender = str(person["gender"])
    if gender not in _PRONOUNS:
        raise ValueError(f"gender must be 'male' or 'female', got {gender!r}")
    full = f"{first} {person['middle']} {person['last']}"
    X = _Bio()
    X.date = format_date(
        int(person["birth_month"]),  # type: ignore[call-overload]
        int(person["birth_day"]),  # type: ignore[call-overload]
        int(person["birth_year"]),  # type: ignore[call-overload]
        int(r() * len(DATE_FORMATS)),
    )
    X.bc = str(person["birth_city"])
    X.uni = str(person["university"])
    X.major = str(person["major"])
    X.emp = str(person["employer"])
    X.cc = str(person["company_city"])
    X.t = 0 if r() < 0.5 else 1
    X.full = full
    X.nick = nickname(first, gender)
    pron = _PRONOUNS[gender]
    X.pron = pron
    X.he, X.his, X.him = pron[1], pron[3], pron[4]
    X.man = "man" if gender == "male" else "woman"
    X.full_ref = _name_ref(full)
    X.first_ref = _name_ref(first)
    X.title_ref = _name_ref(f"{_TITLES[gender]} {person['last']}")
    X.nick_ref = _name_ref(X.nick) if X.nick else pron
    nick_known = False

    # Partition the six attributes into units (one, two or three attributes per sentence).
    units = list(_PARTITIONS[bisect_right(_PARTITION_CDF, r())])
    # Order: sometimes chronological (stable by life stage), otherwise fully shuffled.
    for i in range(len(units) - 1, 0, -1):
        j = int(r() * (i + 1))
        units[i], units[j] = units[j], units[i]
    if r() < 0.35:
        units.sort(key=lambda u: u[1])

    # Opening sentence: always introduces the full name, often while stating a first fact.
    sentences: list[str] = []
    prev_rank = -1
    x = r()
    if x < 0.55:
        unit = units.pop(0)
        sentences.append(p(unit[2] + unit[3])(X.full_ref, X, p))
        prev_rank = unit[1]
    elif X.nick is not None and x > 0.9:
        sentences.append(_nick_opener(full, X, p))
        nick_known = True
    else:
        sentences.append(p(_OPENERS)(full, X, p))

    # Body: remaining units plus 2-5 fillers from distinct categories at random positions;
    # sometimes the first filler is replaced by a nickname introduction.
    cats = list(range(len(_FILLERS)))
    n_fill = 2 + int(r() * 4)
    body: list[_Unit | int] = list(units)
    for k in range(n_fill):
        j = k + int(r() * (len(cats) - k))
        cats[k], cats[j] = cats[j], cats[k]
        body.insert(int(r() * (len(body) + 1)), cats[k])
    if X.nick is not None and not nick_known and r() < 0.4:
        body[body.index(cats[0])] = _NICK_INTRO

    fillers_at: list[int] = []
    for item in body:
        y = r()
        if y < 0.5:
            ref = pron
        elif y < 0.68:
            ref = X.first_ref
        elif y < 0.82:
            ref = X.title_ref
        elif y < 0.97 and nick_known:
            ref = X.nick_ref
        elif y >= 0.97:
            ref = X.full_ref
        else:
            ref = pron
        if isinstance(item, int):
            prev_rank = -1  # a temporal connector must follow a fact sentence directly
            if item == _NICK_INTRO:
                sentences.append(p(_NICK_INTROS)(X.first_ref if y < 0.3 else pron, X, p))
                nick_known = True
            else:
                fillers_at.append(len(sentences))
                sentences.append(p(_FILLERS[item])(ref, X, p))
        else:
            _, rank, lead, free, events = item
            connectors: tuple[str, ...] = ()
            if prev_rank >= 0 and r() < 0.4:
                if rank == prev_rank:
                    connectors, events = _SAME, lead
                elif events:
                    connectors = _FORWARD if rank > prev_rank else _BACKWARD
            if connectors:
                sentences.append(p(connectors) + p(events)(_lower(ref), X, p))
            else:
                k = int(r() * (len(lead) + len(free)))
                tmpl = lead[k] if k < len(lead) else free[k - len(lead)]
                sentences.append(tmpl(ref, X, p))
            prev_rank = rank

    text = " ".join(sentences)
    words = text.count(" ") + 1
    if words < _MIN_WORDS:
        # Top up with fillers from unused categories (appended: they reference nothing earlier).
        k = n_fill
        while words < _MIN_WORDS:
            cat = cats[k % len(cats)]
            k += 1
            extra = p(_FILLERS[cat])(pron, X, p)
            sentences.append(extra)
            words += extra.count(" ") + 1
        text = " ".join(sentences)
    elif words > _MAX_WORDS:
        # Drop fillers from the end until the bio fits; facts are never dropped.
        for idx in reversed(fillers_at):
            words -= sentences[idx].count(" ") + 1
            sentences[idx] = ""
            if words <= _MAX_WORDS:
                break
        text = " ".join(s for s in sentences if s)
    return text
