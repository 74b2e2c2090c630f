from collections import Counter, defaultdict

import numpy as np

from corpus_gen.bios import stream


def _documents(config):
    layout = stream.blocks(config)
    slot = stream.resolve(config, layout, 0, stream.total_records(layout))
    return layout, slot


def _min_gap(slot):
    seen = defaultdict(list)
    for position, person in zip(slot.position.tolist(), slot.person.tolist()):
        seen[person].append(position)
    return min(min(np.diff(p)) for p in seen.values() if len(p) > 1)


def test_every_person_copy_appears_exactly_once(bios_config):
    config = bios_config(people=1001, variant="multi5_permute", mode="mix", qa_copies=2)
    layout, slot = _documents(config)
    pairs = Counter(zip(slot.person.tolist(), slot.block.tolist()))
    expected = {(p, b) for b, block in enumerate(layout) for p in range(block.people)}
    assert set(pairs) == expected and max(pairs.values()) == 1
    assert [b.kind for b in layout] == ["bio"] * 5 + ["qa"] * 2


def test_one_persons_documents_are_far_apart(bios_config):
    config = bios_config(people=1001, variant="multi5_permute", mode="mix")
    _, slot = _documents(config)
    # bound from the layout: half of the smallest population (the 500 QA-train people)
    assert _min_gap(slot) >= 250


def test_celebrity_layout_keeps_the_gap_and_gives_minorities_one_biography(bios_config):
    config = bios_config(people=3000, celebrities=400, variant="single",
                         celebrity_variant="multi5_permute")
    layout, slot = _documents(config)
    per_person = Counter(slot.person.tolist())
    assert all(per_person[p] == 5 for p in range(400))
    assert all(per_person[p] == 1 for p in range(400, 3000))
    assert _min_gap(slot) >= 200


def test_order_is_shuffled_and_depends_on_seed(bios_config):
    _, a = _documents(bios_config(people=1000, seed=0))
    _, b = _documents(bios_config(people=1000, seed=1))
    assert (a.person != np.arange(1000)).mean() > 0.95
    assert (a.person != b.person).mean() > 0.95


def test_a_slice_resolves_to_the_same_documents_as_the_whole(bios_config):
    config = bios_config(people=999, variant="multi3")
    layout, whole = _documents(config)
    part = stream.resolve(config, layout, 1500, 1700)
    assert part.person.tolist() == whole.person[1500:1700].tolist()
