"""The losses a model of a markov corpus is measured against, in nats per predicted token (the
tokens after the first k, whose law is the chain's):

- entropy_rate: the loss of the true table, sum_c pi(c) H(P[c]) over the stationary k-gram
  law pi; fresh tables: the same predictor (each sequence's own table) estimated by Monte Carlo;
- unigram_entropy: H of the stationary law of one token, the best loss of a predictor that
  ignores the context (a model stuck at the unigram solution); fresh tables: ln A (by symmetry
  every token is uniform once the table is unknown);
- bayes_loss: the loss of the Bayes predictor averaged over positions k..T-1 as the corpus
  draws them. Fixed tables: the true table, exactly (the k-gram law propagated from the initial
  one); fresh tables: add-beta counting, (n(c, a) + beta) / (n(c) + A beta) over the sequence so
  far, by Monte Carlo over `reference_samples` sequences of the stream "references", with its
  standard error.
"""

import numpy as np

from corpus_gen.markov.config import MarkovConfig


def entropy(law: np.ndarray) -> np.ndarray:
    """Entropy in nats of each law along the last axis (0 log 0 = 0)."""
    law = np.asarray(law, dtype=np.float64)
    return -np.sum(np.where(law > 0, law * np.log(np.where(law > 0, law, 1.0)), 0.0), axis=-1)


def context_transitions(table: np.ndarray) -> np.ndarray:
    """(S, S): the chain on k-grams, c -> (c A + a) mod S with probability P[c, a]."""
    contexts, alphabet = table.shape
    moves = np.zeros((contexts, contexts))
    rows = np.repeat(np.arange(contexts), alphabet)
    np.add.at(moves, (rows, (rows * alphabet + np.tile(np.arange(alphabet), contexts))
                      % contexts), table.ravel())
    return moves


def stationary(table: np.ndarray) -> np.ndarray:
    """(S,): the stationary law of the k-gram chain (the least-squares solution of pi M = pi,
    sum pi = 1: exact for an irreducible chain)."""
    moves = context_transitions(table)
    contexts = len(moves)
    system = np.vstack([moves.T - np.eye(contexts), np.ones(contexts)])
    law = np.linalg.lstsq(system, np.eye(contexts + 1)[-1], rcond=None)[0]
    return np.clip(law, 0.0, None) / np.clip(law, 0.0, None).sum()


def token_law(contexts_law: np.ndarray, alphabet: int) -> np.ndarray:
    """(A,): the law of a k-gram's last token (its least significant digit)."""
    return np.bincount(np.arange(len(contexts_law)) % alphabet, contexts_law, alphabet)


def fixed_references(table: np.ndarray, initial: np.ndarray, seq_len: int,
                     order: int) -> dict[str, float]:
    """The references of one table shared by every sequence (switching or fixed)."""
    pi = stationary(table)
    row_entropy = entropy(table)
    law, moves, losses = np.asarray(initial, dtype=np.float64), context_transitions(table), []
    for _ in range(order, seq_len):  # the law of the context before each predicted token
        losses.append(law @ row_entropy)
        law = law @ moves
    return {"entropy_rate": float(pi @ row_entropy),
            "unigram_entropy": float(entropy(token_law(pi, table.shape[1]))),
            "bayes_loss": float(np.mean(losses))}


def add_beta_losses(tokens: np.ndarray, order: int, alphabet: int,
                    beta: float) -> np.ndarray:
    """(B,): each sequence's mean loss over positions k..T-1 of add-beta counting."""
    contexts = alphabet ** order
    weights = alphabet ** np.arange(order - 1, -1, -1)
    batch, seq_len = tokens.shape
    # (B, T-k): the context before each predicted token
    context = sum(weights[j] * tokens[:, j:seq_len - order + j] for j in range(order))
    counts = np.zeros((batch, contexts, alphabet))
    rows, losses = np.arange(batch), np.zeros(batch)
    for t in range(order, seq_len):  # counts so far: one step at a time, all sequences at once
        c, x = context[:, t - order], tokens[:, t]
        seen = counts[rows, c]
        losses -= np.log((seen[rows, x] + beta) / (seen.sum(1) + alphabet * beta))
        counts[rows, c, x] += 1
    return losses / (seq_len - order)


def true_losses(tokens: np.ndarray, tables: np.ndarray, order: int) -> np.ndarray:
    """(B,): each sequence's mean loss over positions k..T-1 under its own table (B, S, A)."""
    batch, seq_len = tokens.shape
    alphabet = tables.shape[2]
    weights = alphabet ** np.arange(order - 1, -1, -1)
    context = sum(weights[j] * tokens[:, j:seq_len - order + j] for j in range(order))
    probs = tables[np.arange(batch)[:, None], context, tokens[:, order:]]
    return -np.log(probs).mean(1)


def fresh_references(tokens: np.ndarray, tables: np.ndarray, config: MarkovConfig
                     ) -> dict[str, float]:
    """The references of fresh tables, by Monte Carlo over the sequences `tokens` (B, T) with
    their tables (B, S, A)."""
    bayes = add_beta_losses(tokens, config.order, config.alphabet, config.beta)
    return {"entropy_rate": float(true_losses(tokens, tables, config.order).mean()),
            "unigram_entropy": float(np.log(config.alphabet)),
            "bayes_loss": float(bayes.mean()),
            "bayes_loss_stderr": float(bayes.std(ddof=1) / np.sqrt(len(bayes)))}
