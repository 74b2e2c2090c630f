"""A corpus's tokenizer as a HF fast tokenizer that encodes every text with the same ids.

A SentencePiece model (corpus_gen/core/tokenizer.py) is rebuilt piece for piece as a `tokenizers`
pipeline of what SentencePiece does with the options physlm trains it with:

- normalizer: the dummy prefix "▁" once before the text, then each space as "▁" (identity
  normalization, extra whitespace kept);
- added tokens: the user-defined pieces ("\\n", a family's reserved words such as "▁1"), matched
  in the normalized text as SentencePiece matches them, longest first;
- pre-tokenizer: a word starts at each "▁" (`split_by_whitespace`: no piece spans one);
- model: BPE with the merges the pieces' scores order (SentencePiece merges the adjacent pair
  whose joined piece scores highest; HF merges the pair of lowest rank), or Unigram with the
  pieces' scores; byte fallback for characters outside the vocabulary.

A model trained with other options than these is refused rather than encoded differently. A fixed
vocabulary (vocabulary.py: names joined by single spaces, each one token) is a WordLevel model
over whitespace-separated words. No BOS is added (physlm adds none); EOS is the corpus's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sentencepiece import sentencepiece_model_pb2 as sp_model

from corpus_gen.core.tokenizer import CorpusTokenizer, Tokenizer
from corpus_gen.core.vocabulary import Vocabulary
from trainer.errors import TrainError

if TYPE_CHECKING:
    from tokenizers import Tokenizer as FastTokenizer
    from transformers import PreTrainedTokenizerFast

SPACE = "\u2581"  # SentencePiece's visible space
# the trainer and normalizer settings the pipeline above reproduces, as physlm trains them
SENTENCEPIECE_SETTINGS = {
    "trainer_spec.split_by_whitespace": True,
    "trainer_spec.treat_whitespace_as_suffix": False,
    "trainer_spec.byte_fallback": True,
    "normalizer_spec.name": "identity",
    "normalizer_spec.add_dummy_prefix": True,
    "normalizer_spec.remove_extra_whitespaces": False,
    "normalizer_spec.escape_whitespaces": True,
}
Piece = sp_model.ModelProto.SentencePiece


def hf_tokenizer(tokenizer: CorpusTokenizer) -> PreTrainedTokenizerFast:
    """The HF tokenizer of a corpus's tokenizer (SentencePiece model or fixed vocabulary)."""
    from transformers import PreTrainedTokenizerFast

    if isinstance(tokenizer, Vocabulary):
        eos = tokenizer.names[tokenizer.eos_id]
        # no pad token of its own: batches pad with EOS, which a model never reads past
        return PreTrainedTokenizerFast(tokenizer_object=_word_level(tokenizer), eos_token=eos,
                                       pad_token=eos)
    if not isinstance(tokenizer, Tokenizer):
        raise TrainError(f"{type(tokenizer).__name__}: export knows SentencePiece models and "
                         "fixed vocabularies only")
    proto = sp_model.ModelProto()
    proto.ParseFromString(tokenizer.model_bytes)
    processor = tokenizer.processor
    named = {name: processor.id_to_piece(i) for name, i in
             (("unk_token", processor.unk_id()), ("eos_token", processor.eos_id()),
              ("pad_token", processor.pad_id())) if i >= 0}
    return PreTrainedTokenizerFast(tokenizer_object=_sentencepiece(proto), **named)


def _sentencepiece(proto: sp_model.ModelProto) -> FastTokenizer:
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as FastTokenizer

    _refuse_other_settings(proto)
    kind = sp_model.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)
    if kind == "BPE":
        fast = FastTokenizer(_bpe(proto))
    elif kind == "UNIGRAM":
        fast = FastTokenizer(_unigram(proto))
    else:
        raise TrainError(f"SentencePiece model_type {kind}: export maps bpe and unigram only")
    # Metaspace adds the dummy prefix, except to a text that already starts with "▁": doubled,
    # that one keeps its own as SentencePiece does
    fast.normalizer = normalizers.Sequence([normalizers.Replace(" ", SPACE),
                                            normalizers.Replace(Regex(f"\\A{SPACE}"), SPACE * 2)])
    user_defined = sorted((p.piece for p in proto.pieces if p.type == Piece.USER_DEFINED),
                          key=len, reverse=True)  # the longest match first, as SentencePiece
    isolate = [pre_tokenizers.Split(Regex("|".join(map(re.escape, user_defined))), "isolated")]
    fast.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(SPACE, prepend_scheme="always", split=False),
        *(isolate if user_defined else []),
        pre_tokenizers.Split(SPACE, behavior="merged_with_next")])
    fast.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(),
                                      decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return fast


def _refuse_other_settings(proto: sp_model.ModelProto) -> None:
    for key, wanted in SENTENCEPIECE_SETTINGS.items():
        spec, option = key.split(".")
        found = getattr(getattr(proto, spec), option)
        if found != wanted:
            raise TrainError(f"the corpus's tokenizer.model has {key}={found!r}: export "
                             f"reproduces SentencePiece models trained with {wanted!r}, as "
                             "physlm trains them")


def _bpe(proto: sp_model.ModelProto):
    from tokenizers.models import BPE

    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    score = {p.piece: p.score for p in proto.pieces}
    merges = [(piece[:k], piece[k:]) for piece in _mergeable(proto)
              for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
    # the better the joined piece scores, the earlier its merge; ties in piece id order
    merges.sort(key=lambda pair: (-score[pair[0] + pair[1]], vocab[pair[0] + pair[1]]))
    # ignore_merges: a word that is a piece is that piece, so an isolated user-defined piece
    # ("\n", "▁1"), which no merge builds, stays whole
    return BPE(vocab=vocab, merges=merges, unk_token=proto.pieces[proto.trainer_spec.unk_id].piece,
               byte_fallback=True, fuse_unk=True, ignore_merges=True)


def _mergeable(proto: sp_model.ModelProto) -> list[str]:
    """The pieces BPE encoding can build from smaller ones: the normal pieces of 2+ characters."""
    return [p.piece for p in proto.pieces if p.type == Piece.NORMAL and len(p.piece) > 1]


def _unigram(proto: sp_model.ModelProto):
    from tokenizers.models import Unigram

    return Unigram([(p.piece, p.score) for p in proto.pieces], proto.trainer_spec.unk_id,
                   byte_fallback=True)


def _word_level(vocabulary: Vocabulary) -> FastTokenizer:
    from tokenizers import Tokenizer as FastTokenizer
    from tokenizers import pre_tokenizers
    from tokenizers.models import WordLevel

    # a word that is no name fails to encode, as physlm's Vocabulary refuses it; with no decoder,
    # decoding joins the names by spaces, as a document's text does
    fast = FastTokenizer(WordLevel({name: i for i, name in enumerate(vocabulary.names)}))
    fast.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return fast
