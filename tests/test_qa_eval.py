"""QA extraction scoring (`trainer.eval.qa.score_split`) through the real greedy generation, with
planted models: one that recites every right answer scores 1.0 exact and first token, one whose
answers are wrong after a right first token scores 0.0 exact and 1.0 first token, one that
answers wrongly scores 0.0 on both; mixed answers are counted per attribute and pooled by row."""

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from corpus_gen.bios.people import ATTRIBUTES
from corpus_gen.bios.qa import eval_rows, qa_document
from corpus_gen.core.tokenizer import Tokenizer, train_tokenizer
from trainer.eval.generation import generate
from trainer.eval.qa import score_split
from trainer.eval.registry import EvalContext
from trainer.model import ModelConfig, encodings

# Multi-word answers throughout, each person's first words differ from every other's, and names
# of different lengths, so that a batch of prompts is left-padded.
PEOPLE = [
    {"id": 0, "first": "Ada", "middle": "Mae", "last": "Lovelace", "birth_date": "October 2, 1996",
     "birth_city": "Portland, OR", "university": "Stanford University",
     "major": "Computer Science", "employer": "Acme Corporation", "company_city": "Austin, TX"},
    {"id": 1, "first": "Bo", "middle": "Li", "last": "Wu", "birth_date": "March 17, 1954",
     "birth_city": "Denver, CO", "university": "Rice University", "major": "Applied Physics",
     "employer": "Globex Systems", "company_city": "Boston, MA"},
    {"id": 2, "first": "Christabel", "middle": "Jo", "last": "Okonkwo-Smith",
     "birth_date": "July 28, 2003", "birth_city": "Miami, FL",
     "university": "Cornell Tech College", "major": "Marine Biology",
     "employer": "Initech Labs", "company_city": "Seattle, WA"},
]
ELSEWHERE = "Elsewhere"  # what follows a right first word in a wrong answer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """A tiny BPE tokenizer trained on the people's QA documents, as a corpus trains one; 600
    pieces make every answer word a token of its own (400 would split most into "▁" + letters,
    and a bare "▁" first token is right for nearly any answer)."""
    texts = [qa_document(p, tuple(range(len(ATTRIBUTES))), False)[0] for p in PEOPLE]
    return Tokenizer(train_tokenizer(texts, vocab_size=600))


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """The rows of eval/qa_test.jsonl for PEOPLE, through JSON as the file holds them."""
    return [json.loads(json.dumps(row)) for p in PEOPLE for row in eval_rows(p, "test")]


def continuation(tokenizer: Tokenizer, prompt: str, answer: str) -> list[int]:
    """The tokens after the prompt of `<prompt> <answer>.`, as a QA document writes them."""
    return tokenizer.encode(f"{prompt} {answer}.")[len(tokenizer.encode(prompt)):]


class PlantedModel(nn.Module):
    """A model that greedy decoding drives into planted continuations.

    `table` maps a row's tokens so far (prompt + answer tokens generated) to the next token;
    anything else continues with `fallback`. It is the smallest module with what
    trainer/eval/generation.py uses of a GPT: `config` (n_layer, n_head, head_dim size the KV
    cache; pos names the positions in errors), `positional.max_positions` (real learned
    positions, ctx = `config.ctx`), `tok_emb.weight` (device and dtype of the cache), and
    `forward(ids, pos, doc, cache, last_only) -> logits [B, T, V]`. Like a transformer it sees
    a row only through what it cached: its one "key" per token is the token id (head_dim 1), and
    a token attends to the earlier tokens of its own document, whose positions must run 0, 1,
    ... from the row's first real token, or the planted answer is lost.
    """

    def __init__(self, vocab_size: int, table: dict[tuple[int, ...], int], fallback: int,
                 ctx: int = 128):
        super().__init__()
        self.config = ModelConfig(n_layer=1, n_head=1, d_model=1, vocab_size=vocab_size, ctx=ctx,
                                  pos="learned")
        self.tok_emb = nn.Embedding(vocab_size, 1)
        self.positional = encodings()["learned"].load()(self.config)
        self.table, self.fallback = table, fallback

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                doc_ids: torch.Tensor, cache=None, last_only: bool = False) -> torch.Tensor:
        if cache is None:
            tokens, pos, doc = input_ids, position_ids, doc_ids
        else:
            pos, doc = cache.extend(position_ids, doc_ids)
            keys = input_ids[:, None, :, None].to(cache.k.dtype)
            tokens = cache.update(0, keys, keys)[0][:, 0, :, 0].long()
        batch, new = input_ids.shape
        seen = tokens.shape[1] - new
        logits = torch.zeros(batch, new, self.config.vocab_size)
        for b in range(batch):
            for t in range(seen, seen + new):
                mine = doc[b, : t + 1] == doc[b, t]
                context = tuple(tokens[b, : t + 1][mine].tolist())
                in_order = pos[b, : t + 1][mine].tolist() == list(range(len(context)))
                nxt = self.table.get(context, self.fallback) if in_order else self.fallback
                logits[b, t - seen, nxt] = 1.0
        return logits[:, -1:] if last_only else logits


def plant(tokenizer: Tokenizer, rows: list[dict], answers: list[str]) -> PlantedModel:
    """A planted model that answers row i's prompt with ` <answers[i]>.`, then the EOS token
    (generation here is not told to stop there)."""
    table: dict[tuple[int, ...], int] = {}
    for row, answer in zip(rows, answers, strict=True):
        prompt = tokenizer.encode(row["prompt"])
        said = continuation(tokenizer, row["prompt"], answer)
        for i, token in enumerate(said):
            assert table.setdefault(tuple(prompt + said[:i]), token) == token
    return PlantedModel(tokenizer.vocab_size, table, fallback=tokenizer.eos_id)


def context_for(model: PlantedModel, tokenizer: Tokenizer, tmp_path: Path) -> EvalContext:
    return EvalContext(model=model, tokenizer=tokenizer, corpus_dir=tmp_path, run_dir=tmp_path,
                       device=torch.device("cpu"))


def right(row: dict) -> str:
    return row["answer"]


def right_first_word(row: dict) -> str:
    return f"{row['answer'].split(' ')[0]} {ELSEWHERE}"


def another_persons(row: dict) -> str:
    """The same attribute's answer of the next person: wrong from its first word on."""
    other = PEOPLE[(row["person"] + 1) % len(PEOPLE)]
    return other[row["attribute"]]


def test_the_fixture_is_what_the_scoring_cases_need(tokenizer, rows):
    """Preconditions: six attributes per person, prompts of several lengths, answers of several
    tokens, and the wrong answers wrong in the way each case says."""
    assert [r["attribute"] for r in rows] == list(ATTRIBUTES) * len(PEOPLE)
    assert all(r["prompt"].endswith("?\nAnswer:") for r in rows)
    assert len({len(tokenizer.encode(r["prompt"])) for r in rows}) >= 3
    for row in rows:
        want = continuation(tokenizer, row["prompt"], row["answer"])
        assert len(want) >= 2 and tokenizer.decode(want) == f"{row['answer']}."
        assert tokenizer.decode(want[:1]) == row["answer"].split(" ")[0].rstrip(",")
        half = continuation(tokenizer, row["prompt"], right_first_word(row))
        assert half[0] == want[0] and half[: len(want)] != want
        wrong = continuation(tokenizer, row["prompt"], another_persons(row))
        assert wrong[0] != want[0]


def test_the_planted_model_recites_through_real_generation_with_and_without_cache(tokenizer,
                                                                                  rows):
    model = plant(tokenizer, rows, [right(r) for r in rows])
    prompts = [tokenizer.encode(r["prompt"]) for r in rows]
    wants = [continuation(tokenizer, r["prompt"], r["answer"]) for r in rows]
    budget = max(map(len, wants)) + 2
    cached = generate(model, prompts, budget)
    assert cached == generate(model, prompts, budget, use_cache=False)
    assert cached == [w + [tokenizer.eos_id] * (budget - len(w)) for w in wants]
    # a row alone generates what it generates in the left-padded batch
    assert generate(model, prompts[2:3], budget) == cached[2:3]


def _rates(entry: dict) -> dict:
    """An attribute's scores without its chance (the chance tests check those)."""
    return {key: entry[key] for key in ("exact", "first_token", "n")}


def _expect(result: dict, exact: float, first_token: float, people: int = len(PEOPLE)) -> None:
    assert set(result["per_attribute"]) == set(ATTRIBUTES)
    for attribute in ATTRIBUTES:
        assert _rates(result["per_attribute"][attribute]) == {
            "exact": exact, "first_token": first_token, "n": people}, attribute
    assert (result["exact"], result["first_token"], result["n"]) == (
        exact, first_token, people * len(ATTRIBUTES))


@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_a_model_that_recites_every_answer_scores_one(tokenizer, rows, tmp_path, batch_size):
    model = plant(tokenizer, rows, [right(r) for r in rows])
    _expect(score_split(context_for(model, tokenizer, tmp_path), rows, batch_size), 1.0, 1.0)


@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_a_wrong_answer_with_the_right_first_token_scores_first_token_only(tokenizer, rows,
                                                                           tmp_path, batch_size):
    model = plant(tokenizer, rows, [right_first_word(r) for r in rows])
    _expect(score_split(context_for(model, tokenizer, tmp_path), rows, batch_size), 0.0, 1.0)


@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_a_wrong_answer_scores_zero(tokenizer, rows, tmp_path, batch_size):
    model = plant(tokenizer, rows, [another_persons(r) for r in rows])
    _expect(score_split(context_for(model, tokenizer, tmp_path), rows, batch_size), 0.0, 0.0)


def test_an_answer_without_its_final_period_is_not_exact(tokenizer, rows, tmp_path):
    """The expected continuation is ` <answer>.`: stopping after the words is not a match,
    while anything after the period is ignored (the EOS tokens the planted model goes on with)."""
    model = plant(tokenizer, rows, [f"{r['answer']} {ELSEWHERE}" for r in rows])
    _expect(score_split(context_for(model, tokenizer, tmp_path), rows, 4), 0.0, 1.0)


# per (person, attribute): R right, F right first word then wrong, W wrong from the start
MIXED = {0: "RRRRRR", 1: "RRFFFF", 2: "WWRWWW"}


@pytest.mark.parametrize("batch_size", [1, 4, 18])
def test_mixed_answers_are_counted_per_attribute_and_pooled_over_rows(tokenizer, rows, tmp_path,
                                                                      batch_size):
    kinds = {"R": right, "F": right_first_word, "W": another_persons}
    answers = [kinds[MIXED[r["person"]][ATTRIBUTES.index(r["attribute"])]](r) for r in rows]
    result = score_split(context_for(plant(tokenizer, rows, answers), tokenizer, tmp_path),
                         rows, batch_size)
    third = 1 / 3
    expected = {"birth_date": (2 * third, 2 * third), "birth_city": (2 * third, 2 * third),
                "university": (2 * third, 1.0), "major": (third, 2 * third),
                "employer": (third, 2 * third), "company_city": (third, 2 * third)}
    for attribute, (exact, first_token) in expected.items():
        entry = result["per_attribute"][attribute]
        assert entry["n"] == 3
        assert entry["exact"] == pytest.approx(exact) and entry["first_token"] == pytest.approx(
            first_token), attribute
    # pooled over the 18 rows: 9 exact (6 + 2 + 1), 13 right first tokens (9 + 4 F)
    assert result["n"] == 18
    assert result["exact"] == pytest.approx(9 / 18)
    assert result["first_token"] == pytest.approx(13 / 18)

    # without person 2's last two rows (both W) attributes hold different counts: overall is
    # over rows (9/16, 13/16), not the mean of the attributes' means (0.556, 0.833)
    result = score_split(context_for(plant(tokenizer, rows[:-2], answers[:-2]), tokenizer,
                                     tmp_path), rows[:-2], batch_size)
    assert _rates(result["per_attribute"]["employer"]) == {"exact": 0.5, "first_token": 1.0,
                                                           "n": 2}
    assert _rates(result["per_attribute"]["company_city"]) == {"exact": 0.5, "first_token": 1.0,
                                                               "n": 2}
    assert result["n"] == 16
    assert result["exact"] == pytest.approx(9 / 16)
    assert result["first_token"] == pytest.approx(13 / 16)


def test_chance_is_the_share_of_each_attributes_commonest_answer_and_first_token(tokenizer,
                                                                                   rows, tmp_path):
    """Always guessing an attribute's commonest answer (first token) scores its share: two of
    three university answers begin with "Stanford" (as "University" begins many), so first-token
    chance is 2/3 there, not ~0. Overall chance guesses per attribute: (2 + 2) / 5 first token,
    (1 + 2) / 5 exact, not the pooled commonest first token's 2 / 5."""
    given = {("university", 0): "Stanford University", ("university", 1): "Stanford Tech College",
             ("university", 2): "Rice University", ("major", 0): "Marine Biology",
             ("major", 1): "Marine Biology"}
    chosen = [{**r, "answer": given[r["attribute"], r["person"]]} for r in rows
              if (r["attribute"], r["person"]) in given]
    model = plant(tokenizer, chosen, [r["answer"] for r in chosen])
    result = score_split(context_for(model, tokenizer, tmp_path), chosen, 4)
    university, major = result["per_attribute"]["university"], result["per_attribute"]["major"]
    assert (university["exact_chance"], university["first_token_chance"]) == (
        pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert (major["exact_chance"], major["first_token_chance"]) == (1.0, 1.0)
    assert result["exact_chance"] == pytest.approx(3 / 5)
    assert result["first_token_chance"] == pytest.approx(4 / 5)
    assert result["exact"] == result["first_token"] == 1.0


def test_a_split_without_questions_scores_no_data_not_zero(tokenizer, tmp_path):
    model = plant(tokenizer, [], [])
    assert score_split(context_for(model, tokenizer, tmp_path), [], 4) == {
        "exact": None, "first_token": None, "exact_chance": None, "first_token_chance": None,
        "n": 0, "too_long": 0, "per_attribute": {}}


@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_questions_whose_answer_cannot_fit_the_positions_count_as_wrong(tokenizer, rows,
                                                                        tmp_path, batch_size):
    """Learned positions end at ctx: a row whose prompt and answer need more is scored wrong
    and counted in `too_long`, and the others are still answered (not one error for all)."""
    needs = [len(tokenizer.encode(r["prompt"])) + len(continuation(tokenizer, r["prompt"],
                                                                   r["answer"])) for r in rows]
    ctx = sorted(needs)[len(needs) // 2]
    model = plant(tokenizer, rows, [right(r) for r in rows])
    model.config.ctx = ctx
    model.positional = encodings()["learned"].load()(model.config)
    result = score_split(context_for(model, tokenizer, tmp_path), rows, batch_size)
    fit = sum(n <= ctx for n in needs)
    assert 0 < fit < len(rows)
    assert result["too_long"] == len(rows) - fit
    assert result["exact"] == result["first_token"] == fit / len(rows)


def test_a_trained_model_beats_the_same_model_at_init(tokenizer, rows, tmp_path, one_thread):
    """A real GPT, memorising the people's QA documents, goes from 0.0 to answering them."""
    from corpus_gen.bios.qa import answered
    from tests.conftest import memorize
    from trainer.model import GPT

    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=64, vocab_size=tokenizer.vocab_size,
                            ctx=128))
    at_init = score_split(context_for(model, tokenizer, tmp_path), rows, 8)
    # one question per document: each prompt is then learned where evaluation asks it, first
    memorize(model, [tokenizer.encode(answered(r["prompt"], r["answer"])) for r in rows],
             tokenizer.eos_id, steps=300, lr=0.003)
    trained = score_split(context_for(model, tokenizer, tmp_path), rows, 8)
    assert at_init["exact"] == 0.0 and at_init["first_token"] < 0.2
    assert trained["exact"] >= 0.9 and trained["first_token"] == 1.0


def test_chance_counts_the_expected_answers_not_the_models(tokenizer, rows, tmp_path):
    universities = [row for row in rows if row["attribute"] == "university"]  # three apart
    model = plant(tokenizer, universities, [PEOPLE[0]["university"]] * 3)  # always the first
    entry = score_split(context_for(model, tokenizer, tmp_path), universities,
                        4)["per_attribute"]["university"]
    assert entry["exact"] == entry["first_token"] == pytest.approx(1 / 3)
    assert entry["first_token_chance"] == entry["exact_chance"] == pytest.approx(1 / 3)
