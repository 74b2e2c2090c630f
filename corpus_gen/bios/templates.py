"""bioS sentence templates (one sentence per attribute) and their compiled plans.

Every template mentions the person exactly once through one subject-type slot
(``{Subj}``, ``{subj}``, ``{Poss}``, ``{poss}`` or ``{obj}``) and the attribute
exactly once through ``{value}``. ``{value}`` is always preceded by a space and
followed by a space, a comma or the final period, so that values stay
whitespace-delimited words after rendering (the tokenizer-level QA relies on it).

Each template is compiled once (``PLANS``) into terms: runs of literal words (pronoun
baked in) and the value or the name with the punctuation glued to them. `corpus_gen.bios.units`
spells biographies from these terms; ``render_template`` renders one template through them.
"""

from __future__ import annotations

from dataclasses import dataclass

BIRTH_DATE: tuple[str, ...] = (
    "{Subj} was born on {value}.",
    "{Subj} came into the world on {value}.",
    "{Poss} date of birth is {value}.",
    "{Poss} birth date is recorded as {value}.",
    "On {value}, {subj} was born.",
    "{Subj} entered the world on {value}.",
    "{Poss} life began on {value}.",
    "{Subj} was welcomed into the world on {value}.",
    "Family records show that {subj} was born on {value}.",
    "{Subj} first saw the light of day on {value}.",
    "{Subj} was born on {value}, according to family records.",
    "It was on {value} that {subj} was born.",
    "{Subj} lists {value} as the date of birth on official forms.",
    "{Poss} story begins on {value}.",
    "Records indicate that {subj} was born on {value}.",
    "{Subj} arrived in this world on {value}.",
    "The day {subj} was born was {value}.",
    "{Poss} birth certificate bears the date {value}.",
    "According to official documents, {subj} was born on {value}.",
    "{Subj} was born in the early hours of {value}.",
    "Hospital records list {obj} as having been born on {value}.",
    "The family registry lists {obj} as born on {value}.",
    "Birth records show {obj} arriving on {value}.",
    "{Subj} has been counting birthdays since {value}.",
    "{Poss} birth occurred on {value}.",
    "The date {value} is when {subj} was born.",
    "{Subj} took a first breath on {value}.",
    "{Poss} arrival came on {value}.",
    "{Subj} was born on {value}, a date that family members still celebrate.",
    "Family members still celebrate {value}, the day {subj} was born.",
    "There was great joy on {value}, when {subj} was born.",
    "{Subj} is known to have been born on {value}.",
    "As far as official records go, {subj} was born on {value}.",
    "{Subj} marks {value} as the day of birth.",
    "When asked for a birth date, {subj} answers with {value}.",
    "Documents confirm {value} as the day {subj} was born.",
    "{Subj} came along on {value}.",
    "{Subj} was brought into the world on {value}.",
    "A birth certificate shows that {subj} was born on {value}.",
    "The world first met {obj} on {value}.",
    "The world welcomed {obj} on {value}.",
    "Nobody in the family forgets {value}, the day {subj} arrived.",
    "{Poss} life story starts on {value}.",
    "{Poss} journey through life began on {value}.",
    "The birth date on file for {obj} is {value}.",
    "Official paperwork gives {value} as the birth date for {obj}.",
    "Life began for {obj} on {value}.",
    "Every year, the family celebrates the anniversary of {value}, the day {subj} was born.",
    "Every form {subj} fills out shows {value} as the birth date.",
    "According to {poss} passport, the date of birth is {value}.",
)

BIRTH_CITY: tuple[str, ...] = (
    "{Subj} was born in {value}.",
    "{Subj} was born and raised in {value}.",
    "{Poss} birthplace is {value}.",
    "{Poss} place of birth is {value}.",
    "{Subj} hails from {value}.",
    "{Subj} is a native of {value}.",
    "{Poss} hometown is {value}.",
    "It was in {value} that {subj} was born.",
    "The city of {value} is where {subj} was born.",
    "{Subj} was born in the city of {value}.",
    "{Subj} took a first breath in {value}.",
    "{Subj} entered the world in {value}.",
    "{Subj} came into the world in {value}.",
    "{Poss} life began in {value}.",
    "{Poss} story began in {value}.",
    "{Poss} birth took place in {value}.",
    "Hospital records show that {subj} was born in {value}.",
    "{Subj} was delivered at a hospital in {value}.",
    "{Subj} lists {value} as the place of birth.",
    "{Subj} was born in {value} and still considers it home.",
    "{Subj} proudly names {value} as the city of birth.",
    "Neighbors in {value} still remember the day {subj} was born there.",
    "{Subj} first saw the light of day in {value}.",
    "{Subj} arrived in the world in {value}.",
    "{Subj} was welcomed into the world in {value}.",
    "The world welcomed {obj} in {value}.",
    "The world first met {obj} in {value}.",
    "{Subj} is originally from {value}.",
    "{Subj} originally comes from {value}.",
    "{Poss} roots lie in {value}, the city of birth.",
    "{Poss} birth city is {value}.",
    "{Poss} city of birth is {value}.",
    "{Poss} native city is {value}.",
    "{Subj} was born in {value}, according to family records.",
    "According to official documents, {subj} was born in {value}.",
    "{Subj} started life in {value}.",
    "{Subj} was born into a family living in {value}.",
    "{Subj} is a proud native of {value}.",
    "{Subj} was born in {value}, a city that still feels like home.",
    "Those who know {obj} well can name {value} as the place of birth.",
    "The hometown listed for {obj} is {value}.",
    "The place of birth on file for {obj} is {value}.",
    "The records list {value} as the birthplace for {obj}.",
    "{Subj} was born and spent early childhood in {value}.",
    "When asked about a birthplace, {subj} names {value}.",
    "{Subj} can claim {value} as a birthplace.",
    "{Poss} birthplace, {value}, remains a special place.",
    "Life began for {obj} in {value}.",
    "{Subj} was born in {value} on a quiet morning.",
    "Birth records from {value} include an entry for {obj}.",
    "The records show that {poss} birthplace is {value}.",
)

UNIVERSITY: tuple[str, ...] = (
    "{Subj} studied at {value}.",
    "{Subj} attended {value}.",
    "{Subj} graduated from {value}.",
    "{Subj} earned a degree from {value}.",
    "{Subj} received an education at {value}.",
    "{Subj} completed a degree at {value}.",
    "{Subj} is a graduate of {value}.",
    "{Subj} is an alum of {value}.",
    "{Poss} alma mater is {value}.",
    "{Poss} university was {value}.",
    "{Poss} college years were spent at {value}.",
    "{Poss} higher education took place at {value}.",
    "{Subj} enrolled at {value}.",
    "{Subj} pursued higher education at {value}.",
    "{Subj} went to college at {value}.",
    "{Subj} spent four years studying at {value}.",
    "{Subj} holds a degree from {value}.",
    "{Subj} was a student at {value}.",
    "{Subj} received academic training at {value}.",
    "{Subj} finished university studies at {value}.",
    "At {value}, {subj} completed an undergraduate education.",
    "It was at {value} that {subj} studied.",
    "{Subj} chose {value} for university.",
    "{Subj} picked {value} for higher education.",
    "{Subj} was admitted to {value} and studied there.",
    "{Subj} earned a diploma from {value}.",
    "{Subj} graduated with honors from {value}.",
    "{Subj} studied for a degree at {value}.",
    "{Poss} academic home was {value}.",
    "{Poss} studies took place at {value}.",
    "{Poss} education was completed at {value}.",
    "{Poss} diploma comes from {value}.",
    "{Poss} degree was awarded by {value}.",
    "A degree from {value} was awarded to {obj}.",
    "The university that educated {obj} was {value}.",
    "Professors at {value} taught {obj} during the college years.",
    "{Subj} spent the college years at {value}.",
    "{Subj} went on to study at {value}.",
    "{Subj} took classes at {value} until graduation.",
    "{Subj} received a university education at {value}.",
    "{Subj} proudly calls {value} an alma mater.",
    "{Subj} earned a bachelor's degree at {value}.",
    "{Subj} was educated at {value}.",
    "{Subj} pursued undergraduate studies at {value}.",
    "{Subj} obtained a degree from {value}.",
    "Records from {value} list {obj} among its graduates.",
    "University studies brought {obj} to {value}.",
    "Higher education took {obj} to {value}.",
    "College life for {obj} took place at {value}.",
    "{Subj} joined the student body of {value}.",
    "{Subj} became a student at {value} after high school.",
    "Everyone who knows the family is aware that {poss} alma mater is {value}.",
)

MAJOR: tuple[str, ...] = (
    "{Subj} majored in {value}.",
    "{Subj} studied {value}.",
    "{Poss} major was {value}.",
    "{Poss} field of study was {value}.",
    "{Subj} earned a degree in {value}.",
    "{Subj} specialized in {value}.",
    "{Subj} focused on {value} in college.",
    "{Subj} chose {value} as a major.",
    "{Subj} received a degree in {value}.",
    "{Subj} pursued a degree in {value}.",
    "{Poss} academic focus was {value}.",
    "{Poss} area of study was {value}.",
    "{Poss} chosen discipline was {value}.",
    "{Poss} degree is in {value}.",
    "{Subj} concentrated on {value} during college.",
    "{Subj} completed a major in {value}.",
    "{Subj} graduated with a major in {value}.",
    "{Subj} devoted the college years to studying {value}.",
    "{Subj} spent the university years studying {value}.",
    "{Subj} took up {value} at university.",
    "{Subj} read {value} at university.",
    "{Subj} holds a degree in {value}.",
    "{Subj} studied the field of {value}.",
    "{Subj} trained in the discipline of {value}.",
    "At university, {subj} majored in {value}.",
    "In college, {subj} studied {value}.",
    "During college, {subj} focused on {value}.",
    "As an undergraduate, {subj} studied {value}.",
    "It was {value} that {subj} studied in college.",
    "The subject that {subj} chose for college was {value}.",
    "The major {subj} selected was {value}.",
    "The field that {subj} pursued in college was {value}.",
    "{Subj} declared {value} as a major.",
    "{Subj} selected {value} as the field of study.",
    "{Subj} earned a bachelor's degree in {value}.",
    "{Subj} completed coursework in {value}.",
    "{Subj} dedicated several years to the study of {value}.",
    "{Poss} college major was {value}.",
    "{Poss} university studies centered on {value}.",
    "{Poss} coursework focused on {value}.",
    "{Poss} studies concentrated on {value}.",
    "{Poss} diploma is in the field of {value}.",
    "{Poss} academic training was in {value}.",
    "Professors trained {obj} in {value}.",
    "College gave {obj} a solid grounding in {value}.",
    "University training prepared {obj} in the field of {value}.",
    "Studies in {value} occupied {obj} throughout college.",
    "{Subj} went to college to study {value}.",
    "{Subj} pursued studies in {value}.",
    "{Subj} earned academic credentials in {value}.",
    "At university, {poss} major was {value}.",
)

EMPLOYER: tuple[str, ...] = (
    "{Subj} worked for {value}.",
    "{Subj} was employed by {value}.",
    "{Subj} works at {value}.",
    "{Poss} employer was {value}.",
    "{Subj} held a job at {value}.",
    "{Subj} built a career at {value}.",
    "{Subj} joined {value} as a full-time employee.",
    "{Subj} was hired by {value}.",
    "{Subj} took a position at {value}.",
    "{Subj} accepted a job with {value}.",
    "{Subj} served as an employee of {value}.",
    "{Subj} is on the staff of {value}.",
    "{Subj} spent a career working for {value}.",
    "{Poss} career was spent at {value}.",
    "{Poss} job was with {value}.",
    "{Poss} workplace was {value}.",
    "{Poss} professional home was {value}.",
    "{Poss} paycheck came from {value}.",
    "{Poss} position was at {value}.",
    "{Subj} earned a living at {value}.",
    "{Subj} made a living working for {value}.",
    "{Subj} found employment at {value}.",
    "{Subj} was on the payroll of {value}.",
    "{Subj} landed a job at {value}.",
    "{Subj} signed on with {value}.",
    "{Subj} has been employed at {value}.",
    "{Subj} worked as a staff member at {value}.",
    "At {value}, {subj} held a full-time position.",
    "It was {value} that employed {obj}.",
    "The company that employed {obj} was {value}.",
    "The firm {subj} worked for was {value}.",
    "Eventually, {value} hired {obj}.",
    "A position at {value} kept {obj} busy.",
    "Professional life took {obj} to {value}.",
    "{Subj} was a member of the team at {value}.",
    "{Subj} worked full time for {value}.",
    "{Subj} was an employee at {value}.",
    "{Subj} worked at the company {value}.",
    "{Subj} went to work for {value}.",
    "{Subj} started working at {value}.",
    "{Subj} pursued a career with {value}.",
    "{Subj} spent the working years at {value}.",
    "{Poss} professional career unfolded at {value}.",
    "{Poss} daily work was done for {value}.",
    "{Poss} employment was with {value}.",
    "The organization that hired {obj} was {value}.",
    "Colleagues at {value} worked closely with {obj} every day.",
    "{Subj} drew a salary from {value}.",
    "{Subj} held a staff position with {value}.",
    "The employer listed for {obj} is {value}.",
    "For many years, {poss} employer was {value}.",
)

COMPANY_CITY: tuple[str, ...] = (
    "{Subj} worked in {value}.",
    "{Subj} works in {value}.",
    "{Poss} workplace was located in {value}.",
    "{Poss} office was in {value}.",
    "{Poss} job was based in {value}.",
    "{Subj} was employed in {value}.",
    "{Subj} held a job in {value}.",
    "{Subj} commuted to an office in {value}.",
    "{Subj} built a career in {value}.",
    "{Subj} spent the working years in {value}.",
    "{Subj} worked at an office in {value}.",
    "{Subj} reported to work in {value}.",
    "{Subj} was based in {value} for work.",
    "{Subj} relocated to {value} for work.",
    "{Subj} moved to {value} for a job.",
    "{Poss} employer is headquartered in {value}.",
    "{Poss} company was based in {value}.",
    "{Poss} employer had its offices in {value}.",
    "{Poss} professional life unfolded in {value}.",
    "{Poss} career took place in {value}.",
    "{Poss} work was centered in {value}.",
    "{Poss} daily commute ended at an office in {value}.",
    "{Poss} place of work was {value}.",
    "{Poss} work location was {value}.",
    "{Poss} job site was in {value}.",
    "{Subj} earned a living in {value}.",
    "{Subj} found work in {value}.",
    "{Subj} held a position in {value}.",
    "{Subj} worked out of {value}.",
    "{Subj} took a job in {value}.",
    "{Subj} accepted a position in {value}.",
    "{Subj} carried out professional duties in {value}.",
    "In {value}, {subj} worked full time.",
    "It was in {value} that {subj} worked.",
    "For work, {subj} traveled to {value} every day.",
    "Work brought {obj} to {value}.",
    "A job brought {obj} to {value}.",
    "A career opportunity took {obj} to {value}.",
    "The office where {subj} worked was in {value}.",
    "The company that employed {obj} was located in {value}.",
    "Colleagues in {value} worked alongside {obj}.",
    "{Subj} was stationed in {value} for work.",
    "{Subj} spent the workdays in {value}.",
    "{Subj} went to work each day in {value}.",
    "{Subj} clocked in every morning in {value}.",
    "{Subj} pursued a career in {value}.",
    "{Subj} was part of the workforce in {value}.",
    "{Poss} office address was in {value}.",
    "The workplace listed for {obj} is in {value}.",
    "Every workday took {obj} to an office in {value}.",
    "For years, {poss} office was located in {value}.",
)

TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_date": BIRTH_DATE,
    "birth_city": BIRTH_CITY,
    "university": UNIVERSITY,
    "major": MAJOR,
    "employer": EMPLOYER,
    "company_city": COMPANY_CITY,
}

# Subject slots and their pronoun forms, in the same order (bioR's mentions use both).
SUBJECT_SLOTS: tuple[str, ...] = ("Subj", "subj", "Poss", "poss", "obj")
_POSSESSIVE = (False, False, True, True, False)
PRONOUNS: dict[str, tuple[str, ...]] = {
    "male": ("He", "he", "His", "his", "him"),
    "female": ("She", "she", "Her", "her", "her"),
}
MODES = ("male", "female", "name")


@dataclass(frozen=True)
class Term:
    """One piece of a compiled sentence: a run of literal words (`slot` None, the words in
    `prefix`), or a slot ("value" or "name") with the text glued to it on either side:
    "({value})." is Term("(", "value", ")."). A sentence is its terms joined by single spaces."""

    prefix: str
    slot: str | None = None
    suffix: str = ""


def compile_plan(template: str, mode: str) -> tuple[Term, ...]:
    """`template` as terms. `mode` is "male"/"female" (pronouns, baked into the literal runs) or
    "name" (the full name in the subject slot, with "'s" for a possessive). Raises ValueError
    unless the template has exactly one subject slot, one ``{value}`` and no other placeholder.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    terms: list[Term] = []
    run: list[str] = []
    slots: list[str] = []
    for word in template.split(" "):
        start = word.find("{")
        if start < 0:
            run.append(word)
            continue
        end = word.find("}", start)
        key, prefix, suffix = word[start + 1 : end], word[:start], word[end + 1 :]
        unknown = key != "value" and key not in SUBJECT_SLOTS
        if end < 0 or "{" in suffix or "}" in suffix or unknown:
            raise ValueError(f"bad placeholder in template {template!r}")
        slots.append(key)
        if key != "value" and mode != "name":
            run.append(prefix + PRONOUNS[mode][SUBJECT_SLOTS.index(key)] + suffix)
            continue
        if run:
            terms.append(Term(" ".join(run)))
            run.clear()
        if key == "value":
            terms.append(Term(prefix, "value", suffix))
        else:
            possessive = _POSSESSIVE[SUBJECT_SLOTS.index(key)]
            terms.append(Term(prefix, "name", ("'s" if possessive else "") + suffix))
    if run:
        terms.append(Term(" ".join(run)))
    if len(slots) != 2 or slots.count("value") != 1:
        raise ValueError(f"template needs one subject slot and one {{value}}: {template!r}")
    return tuple(terms)


# Every shipped template compiled: PLANS[attribute][template index][mode] -> its terms.
PLANS: dict[str, tuple[dict[str, tuple[Term, ...]], ...]] = {
    attribute: tuple({mode: compile_plan(t, mode) for mode in MODES} for t in group)
    for attribute, group in TEMPLATES.items()
}


def render_template(template: str, *, name: str, gender: str, use_name: bool, value: str) -> str:
    """Fill one template: the full name (``name's`` as possessive) or he/she pronouns."""
    if not use_name and gender not in PRONOUNS:
        raise ValueError(f"gender must be 'male' or 'female', got {gender!r}")
    fill = {None: "", "value": value, "name": name}
    return " ".join(t.prefix + fill[t.slot] + t.suffix
                    for t in compile_plan(template, "name" if use_name else gender))
