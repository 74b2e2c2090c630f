import random

import numpy as np
import pytest

from corpus_gen.core import tokenizer as tokenizer_module
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.records import Units
from corpus_gen.core.tokenizer import EOS_ID, Tokenizer, train_tokenizer

WORDS = ["Anya", "Briar", "Forger", "was", "born", "on", "October", "2,", "1996.", "She",
         "studied", "at", "Princeton,", "NJ.", "What", "is", "the", "Forger?\nAnswer:", "[BACK]",
         "naïve", "x=3;", "(17", "*", "14)"]


def _texts(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(train_tokenizer(_texts(3000), 400, user_symbols=["[BACK]"]))


def test_training_is_deterministic():
    texts = _texts(1500, seed=1)
    assert train_tokenizer(texts, 400) == train_tokenizer(texts, 400)


@pytest.mark.parametrize("extra,user_symbols", [
    ([], ["[BACK]"]),
    (["x" * 70_000, "a \u2585 b", ""], ["[BACK]"]),  # skipped by SentencePiece: so by counts too
    (["tab\there", "a  double space", " lead", "end "], []),  # trained on the texts instead
    ([], ["two words"]),
])
def test_bpe_trained_from_word_counts_is_the_model_trained_on_the_texts(extra, user_symbols):
    texts = _texts(1500, seed=3) + extra
    reference = tokenizer_module._train(iter(texts), 400, "bpe", user_symbols)
    assert train_tokenizer(texts, 400, user_symbols=user_symbols) == reference


def test_word_counts_are_used_only_where_they_train_the_same_model():
    assert tokenizer_module._word_counts(["a b a", "b\nc"]) == {"a": 2, "b": 1, "b\nc": 1}
    for text in ("tab\there", "a  b", " a", "a "):
        assert tokenizer_module._word_counts(["a b", text]) is None
    assert tokenizer_module._word_counts(["a b", "x \u2585"]) == {"a": 1, "b": 1}


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_a_vocabulary_smaller_than_the_texts_characters_names_the_size_needed(model_type):
    # 100 distinct characters, the 256 byte pieces and the specials: more pieces than 300
    texts = ["".join(chr(0x4E00 + i) for i in range(100)) + " word"] * 3
    with pytest.raises(ConfigError, match=r"^tokenizer\.vocab_size=300: must be at least "
                                          r"(\d+) for this corpus") as caught:
        train_tokenizer(texts, 300, model_type)
    needed = int(caught.value.reason.split()[4])
    assert 356 < needed < 400
    train_tokenizer(texts, needed, model_type)  # the size it names is enough


def test_word_cache_encoding_equals_sentencepiece_on_whole_texts(tokenizer):
    texts = _texts(2000, seed=2) + ["unseen Zebra-words ok", "a  double space", " lead", "end "]
    for text in texts:
        assert tokenizer.encode(text) == tokenizer.processor.encode(text), text


def test_round_trip_keeps_newlines_and_unseen_characters(tokenizer):
    text = "What is the birth date of Forger?\nAnswer: October 2, 1996. Ωmega"
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_user_symbols_are_single_reserved_tokens(tokenizer):
    back = tokenizer.processor.piece_to_id("[BACK]")
    assert back > EOS_ID
    assert tokenizer.encode("x [BACK] y").count(back) == 1


def test_masked_encoding_zeroes_exactly_the_tokens_of_the_spans(tokenizer):
    prompt, answer = "What is the Forger?\nAnswer:", "October 2, 1996."
    text = f"{prompt} {answer} {prompt} {answer}"
    second = len(prompt) + len(answer) + 2
    ids_bytes, mask_bytes = tokenizer.encode_masked(
        text, [(0, len(prompt)), (second, second + len(prompt))])
    ids, mask = np.frombuffer(ids_bytes, dtype=np.uint16), np.frombuffer(mask_bytes, np.uint8)
    assert ids.tolist() == tokenizer.encode(text) and len(mask) == len(ids)
    assert tokenizer.decode(ids[mask == 1]).split() == f"{answer} {answer}".split()
    assert tokenizer.decode(ids[mask == 0]).split() == f"{prompt} {prompt}".split()


def test_unit_encoding_equals_sentencepiece_on_the_joined_text(tokenizer):
    rng = random.Random(3)
    strings = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    units = Units(strings)
    offsets = np.cumsum([0] + [rng.randint(1, 30) for _ in range(400)])
    ids = np.array([rng.randrange(len(strings)) for _ in range(offsets[-1])])
    # two calls: the second finds every unit encoded already (and the table grew in between)
    for chunk in (ids[: len(ids) // 2], ids):
        tokens, counts = tokenizer.encode_units(units, chunk)
        assert tokens.dtype == np.dtype(tokenizer.dtype) and len(counts) == len(chunk)
        assert tokens.tolist() == tokenizer.processor.encode(" ".join(units.strings[chunk]))
        ends = np.cumsum(counts)
        for k in rng.sample(range(len(chunk)), 50):
            word_tokens = tokens[ends[k] - counts[k] : ends[k]].tolist()
            assert word_tokens == tokenizer.processor.encode(units.strings[chunk[k]])


def test_token_id_names_a_piece_or_says_there_is_none(tokenizer):
    back = tokenizer.token_id("[BACK]")
    assert back is not None and tokenizer.encode("[BACK]")[-1] == back
    assert tokenizer.token_id("\n") == tokenizer.processor.piece_to_id("\n") == 4
    assert tokenizer.token_id("<unk>") == 0  # the piece itself, not the answer for unknowns
    assert tokenizer.token_id("no such piece") is None
    assert tokenizer.token_id("</s>") == EOS_ID == tokenizer.eos_id
