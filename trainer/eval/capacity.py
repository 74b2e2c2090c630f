"""Knowledge capacity (Physics of LMs Part 3.3): how many bits of a bioD or bioS population the
model provably stores, from its loss on every person's document, against the data's information
content.

A population is N people with distinct names out of a name space of N0, each with a value for
each of K attributes. bioD (corpus_gen/biod) draws each value as C chunks from the attribute's
dictionary of D chunks of L tokens over an alphabet of T tokens, the dictionaries themselves at
random: `biod.json` holds the parameters, the dictionaries and the information content

    information_bits = name_bits + value_bits + dictionary_bits
                     = log2 C(N0, N) + N K C log2 D + K log2 C(T^L, D).

bioS (corpus_gen/bios/capacity.py) draws each value uniformly from a fixed pool of |V_k| (the
birth date of 12 x 28 x 200, the birth city, university, major and employer; the company city
is the employer's, scored with it), so its `bios.json` has no dictionary term:
log2 C(N0, N) + N sum_k log2 |V_k|.

Each row of the eval set (`biod_people`, `bios_people`) is a person's document as training reads
it, with the spans of the name and of each attribute's value (capacity_data.py). A document is
read once, teacher-forced as training reads it (attention within the document, positions from
its first token, the first token predicted at a random other document's <eos>:
`document_logprobs`), in batches without gradients. With CE_name(i) the summed cross-entropy
(nats) of person i's name tokens and CE_val(i, k) that of attribute k's value (bioD: its C L
tokens; bioS: its words, over all its spans), and b_k = C log2 D (bioD) or log2 |V_k| (bioS)
the bits of one value:

- name bits       = sum_i max(0, log2 N0 - CE_name(i) / ln 2)
- value bits      = sum_(i,k) max(0, b_k - CE_val(i, k) / ln 2)
- dictionary bits (bioD) = sum_k sum_(d in dictionary k) max(0, L log2 T + log2 q_k(d)), where
  q_k(d) is the mean over people of the model's probability of chunk d's L tokens
  (teacher-forced) where the person's value for k begins; 0 when D >= T^L (every chunk is in
  the dictionary). For L = 1 that is D entries of the softmax at one position per (person,
  attribute), read in the same pass for every evaluated person; for L > 1 the D candidate
  chunks are scored after the document's prefix for `dictionary_people` people, evenly spaced.

`bits` is their sum, `bits_per_param` = bits / the model's non-embedding parameters and
`bits_per_param_total` = bits / all of them (the paper's ~2 bits/param at 1000 exposures).

Why lower bounds. A code that knew the model could send the data in about its cross-entropy,
so the bits above (each term clipped at 0: a person the model does not know costs it nothing)
are bits the model's weights must hold. They stop short of the information content by what no
next-token predictor can have: before a document names its person the model cannot know which
person it is, so a model that knows the whole population gives a name probability at best 1/N
and scores N log2(N0/N) name bits: log2 C(N0, N) less the order of the names, which the data
does not fix, at most N log2 e (about that when N << N0; (n/k)^k <= C(n, k) <= (e n/k)^k). A
bioS biography may also state a value before the name ("On October 2, 1996, Anya ... was
born."), which then costs the model its full bits: a bioS corpus scores a little under the
values' content even for a perfect model. A model that knows the dictionaries scores K D
(L log2 T - log2 D) dictionary bits, K log2 C(T^L, D) less at most K D log2 e, and one that
also knows the people slightly less, by the sampling spread of q_k around 1/D (the mean of
log2 q_k is at most log2 of its mean). `reachable` holds these (what a perfect predictor of the
evaluated people scores, the dictionary term up to that spread) per term, and `share` the
term's measured share of it; the paper's theorem is a lower bound of the same shape.

Results: `bits`, `name_bits`, `value_bits`, `dictionary_bits`, `bits_per_param`,
`bits_per_param_total`, `information_bits` (from the corpus), `stored_share` = bits /
information_bits (over all N people: with `max_people` only the first people are evaluated),
`name_ce` and `value_ce` (mean summed cross-entropy of a name and of a value, nats), `people`
and `dictionary_people` evaluated, `parameters` and `parameters_total`, the `setting` (bioD: N0,
N, K, C, D, L, T; bioS: N0, N, K and each attribute's number of values); `per_term` {name,
value, dictionary: {information (the corpus's term), reachable, share}} and `per_attribute`
{attribute: {value_bits, value_ce, dictionary_bits}}, breakdowns that `physlm report` keeps
out of its headline table.
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_gen.core.config import require
from trainer.errors import TrainError
from trainer.eval.capacity_data import (
    TERMS,
    Dictionaries,
    Documents,
    Population,
    load_documents,
    read_population,
)
from trainer.eval.registry import EvalContext, Task, register

_CANDIDATE_ROWS = 16384  # L > 1: candidate sequences built at a time (bounds memory)


@dataclass
class CapacityOptions:
    """The experiment's `eval.capacity` group: the first `max_people` people (0: all),
    `batch_size` documents per forward pass, and for bioD chunks of L > 1 tokens the people the
    dictionary term is measured on (`dictionary_people`; 0: all evaluated)."""

    max_people: int = 0
    batch_size: int = 64
    dictionary_people: int = 256

    def validate(self) -> None:
        require(self.max_people >= 0, "max_people", self.max_people, "must be >= 0 (0: all)")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        require(self.dictionary_people >= 0, "dictionary_people", self.dictionary_people,
                "must be >= 0 (0: all evaluated people)")


def document_logprobs(context: EvalContext, tokens: np.ndarray, lengths: np.ndarray,
                      batch_size: int, at: np.ndarray | None = None,
                      candidates: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's log-probability (P, W) of every token of each document (rows of `tokens`,
    `lengths` long; 0 past them), read as training reads it: the trainer confines attention to
    each document (train.doc_mask) with positions restarting at its first token, and a document's
    first token is predicted at the end of the one before it, its <eos>. So each document runs
    alone followed by its <eos>; token j > 0 is scored at position j - 1, and the first token
    under the mean of the batch's <eos> laws: after a random other document, as in the shuffled
    stream (after one given document, a model that learned which documents follow which in its
    shards would be scored on its memory of the order). Documents are batched in order of
    length (a shorter one runs on into <eos> padding no earlier position attends to): one
    forward pass each, the scores gathered by index. With `at` (P, K) positions (>= 1) and
    `candidates` (K, D) token ids, also the probabilities of candidate d of k at position
    at[p, k], summed over the documents: (K, D)."""
    import torch

    from trainer.eval.generation import evaluating

    model = context.model
    limit = model.positional.max_positions
    if limit is not None and lengths.max() + 1 > limit:
        raise TrainError(f"the model's {limit} positions cannot hold the {lengths.max()}-token "
                         "documents and their <eos>")
    eos = torch.full((1, 1), context.tokenizer.eos_id, device=context.device)
    out = np.zeros(tokens.shape)
    if candidates is not None:
        mass = torch.zeros(candidates.shape, dtype=torch.float64)
        candidates_on = torch.from_numpy(candidates).to(context.device)  # [K, D]
    order = np.argsort(lengths, kind="stable")
    with evaluating(model):
        for lo in range(0, len(order), batch_size):
            rows = order[lo : lo + batch_size]
            width = int(lengths[rows].max())
            target = torch.from_numpy(tokens[rows, :width]).to(context.device)
            logits = model(torch.cat([target, eos.expand(len(rows), 1)], 1))  # [b, w+1, V]
            # log-probabilities are gathered logits less their law's log-normalizer: no
            # log_softmax over every position's whole vocabulary
            norm = logits.logsumexp(-1, keepdim=True)  # [b, w+1, 1]
            b = torch.arange(len(rows), device=context.device)
            scores = torch.empty(target.shape, dtype=logits.dtype, device=context.device)
            scores[:, 1:] = (logits[:, : width - 1].gather(-1, target[:, 1:, None])
                             - norm[:, : width - 1])[..., 0]
            # a first token after a random document's <eos>: the batch's <eos> laws mixed
            ends = torch.from_numpy(lengths[rows]).to(context.device)
            first = (logits[b, ends] - norm[b, ends]).logsumexp(0) - math.log(len(rows))  # [V]
            scores[:, 0] = first[target[:, 0]]
            out[rows, :width] = scores.double().cpu().numpy()
            if candidates is not None:
                where = torch.from_numpy(at[rows]).to(context.device) - 1  # [b, K]
                picked = logits[b[:, None], where].gather(
                    -1, candidates_on[None].expand(len(rows), -1, -1)) - norm[b[:, None], where]
                mass += picked.double().exp().sum(0).cpu()  # [K, D]
    out[np.arange(tokens.shape[1]) >= lengths[:, None]] = 0.0
    return out, None if candidates is None else mass.numpy()


def span_sums(logprobs: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Summed log-probabilities over [start, stop) spans (..., 2) of each document's row."""
    cumulative = np.concatenate([np.zeros((len(logprobs), 1)), logprobs.cumsum(1)], 1)
    flat = spans.reshape(len(spans), -1)
    sums = np.take_along_axis(cumulative, flat, 1)
    return (sums[:, 1::2] - sums[:, ::2]).reshape(spans.shape[:-1])


def chunk_mass(context: EvalContext, documents: Documents, biod: Dictionaries,
               sample: np.ndarray, batch_size: int) -> np.ndarray:
    """(K, D): over the `sample` people, the summed probability of each of attribute k's D
    chunks (its L tokens, teacher-forced) right after the document's prefix up to the person's
    value for k. Built in blocks of candidate sequences, each a prefix and one chunk."""
    size, chunk_len = biod.size, biod.chunk_len
    mass = np.zeros((len(biod.dictionaries), size))
    step = max(1, _CANDIDATE_ROWS // size)
    for k in range(len(biod.dictionaries)):
        for lo in range(0, len(sample), step):
            who = sample[lo : lo + step]
            start = np.repeat(documents.values[who, k, 0, 0], size)  # (b D,)
            tokens = np.repeat(documents.tokens[who, : start.max() + chunk_len], size, 0)
            at = start[:, None] + np.arange(chunk_len)
            np.put_along_axis(tokens, at, np.tile(biod.dictionaries[k], (len(who), 1)), 1)
            logprobs, _ = document_logprobs(context, tokens, start + chunk_len, batch_size)
            chunk = np.take_along_axis(logprobs, at, 1).sum(1)
            mass[k] += np.exp(chunk).reshape(len(who), size).sum(0)
    return mass


def reachable_bits(population: Population, people: int) -> dict[str, float]:
    """What a perfect next-token predictor scores on `people` of the N people: each name at best
    1/N, each value exactly, bioD's dictionaries' chunks at 1/D each (up to q_k's spread)."""
    biod, dictionary = population.dictionaries, 0.0
    if biod is not None:
        free = biod.chunk_len * math.log2(biod.alphabet) - math.log2(biod.size)
        dictionary = len(biod.dictionaries) * biod.size * max(0.0, free)
    return {"name_bits": people * math.log2(population.name_space / population.people),
            "value_bits": people * float(population.value_bits.sum()),
            "dictionary_bits": dictionary}


def dictionary_bits(mass: np.ndarray, people: int, biod: Dictionaries) -> np.ndarray:
    """(K,): sum_d max(0, L log2 T + log2 q_k(d)), q_k = mass / people; 0 when D >= T^L."""
    free = biod.chunk_len * math.log2(biod.alphabet)
    if free <= math.log2(biod.size):
        return np.zeros(len(mass))
    with np.errstate(divide="ignore"):  # a chunk the model never gives: log2 0, clipped to 0
        return np.maximum(0.0, free + np.log2(mass / people)).sum(1)


def _share(bits: float, whole: float) -> float | None:
    """bits / whole; None (no data) where there is nothing to store."""
    return bits / whole if whole > 0 else None


def _dictionary_term(context: EvalContext, population: Population, documents: Documents,
                     options: CapacityOptions, mass: np.ndarray | None
                     ) -> tuple[np.ndarray, int]:
    """(K,) dictionary bits and the people they were measured on: bioD's, from the chunk
    probabilities `mass` of the documents' pass (L = 1) or a pass of their own (L > 1)."""
    biod, count = population.dictionaries, len(documents.lengths)
    if biod is None:
        return np.zeros(len(population.attributes)), 0
    sample = np.arange(count)
    if mass is None:
        wanted = min(count, options.dictionary_people or count)
        sample = np.unique(np.linspace(0, count - 1, wanted).round().astype(np.int64))
        mass = chunk_mass(context, documents, biod, sample, options.batch_size)
    return dictionary_bits(mass, len(sample), biod), len(sample)


def chunk_candidates(population: Population, documents: Documents
                     ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """document_logprobs' `at` and `candidates` where the chunks' law is read in the main pass
    (bioD with one-token chunks, C = L = 1), else (None, None)."""
    biod = population.dictionaries
    if biod is None or biod.chunk_len != 1:
        return None, None
    return documents.values[:, :, 0, 0], biod.dictionaries[..., 0]


def run(context: EvalContext, options: CapacityOptions) -> dict:
    population = read_population(context.corpus_dir)
    documents = load_documents(context, population, options.max_people)
    count = len(documents.lengths)
    logprobs, mass = document_logprobs(context, documents.tokens, documents.lengths,
                                       options.batch_size,
                                       *chunk_candidates(population, documents))
    per_dictionary, dictionary_people = _dictionary_term(context, population, documents,
                                                         options, mass)
    name_ce = -span_sums(logprobs, documents.names[:, None])[:, 0]  # (P,)
    value_ce = -span_sums(logprobs, documents.values).sum(2)  # (P, K): over each value's spans
    value = np.maximum(0.0, population.value_bits - value_ce / math.log(2))  # (P, K)
    terms = {"name_bits": float(np.maximum(0.0, math.log2(population.name_space)
                                           - name_ce / math.log(2)).sum()),
             "value_bits": float(value.sum()), "dictionary_bits": float(per_dictionary.sum())}
    bits = sum(terms.values())
    reachable = reachable_bits(population, count)
    information = population.information
    parameters = context.model.num_parameters(non_embedding=True)
    parameters_total = context.model.num_parameters(non_embedding=False)
    return {
        "bits": bits, **terms,
        "bits_per_param": bits / parameters, "bits_per_param_total": bits / parameters_total,
        "information_bits": information["information_bits"],
        "stored_share": _share(bits, information["information_bits"]),
        "name_ce": float(name_ce.mean()), "value_ce": float(value_ce.mean()),
        "people": count, "dictionary_people": dictionary_people,
        "parameters": parameters, "parameters_total": parameters_total,
        "setting": population.setting,
        "per_term": {key.removesuffix("_bits"): {
            "information": information[key], "reachable": reachable[key],
            "share": _share(terms[key], reachable[key])} for key in TERMS},
        "per_attribute": {attribute: {"value_bits": float(value[:, k].sum()),
                                      "value_ce": float(value_ce[:, k].mean()),
                                      "dictionary_bits": float(per_dictionary[k])}
                          for k, attribute in enumerate(population.attributes)},
    }


def plot(results: dict, path: Path) -> None:
    """Left: each term's bits against what a perfect predictor reaches and the information
    content (log scale). Right: the model's bits against its parameters, with the 1 and 2
    bits/param lines."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.8))
    left, right = fig.subplots(1, 2)
    per = results["per_term"]
    labels = [*per, "total"]
    bars = {"stored": [*(results[f"{term}_bits"] for term in per), results["bits"]],
            "perfect predictor": [*(per[term]["reachable"] for term in per),
                                  sum(entry["reachable"] for entry in per.values())],
            "information content": [*(per[term]["information"] for term in per),
                                    results["information_bits"]]}
    x = np.arange(len(labels))
    for i, (name, heights) in enumerate(bars.items()):
        left.bar(x + (i - 1) * 0.27, heights, 0.27, label=name,
                 color=("tab:blue", "tab:orange", "tab:gray")[i])
    left.set_xticks(x, labels)
    left.set_yscale("symlog", linthresh=1.0)
    left.set_ylim(0, 30 * max(1.0, *bars["information content"]))  # room for the legend
    left.set_ylabel("bits")
    run = f"{results['run']}, " if results.get("run") else ""
    left.set_title(f"Capacity ({run}step {results.get('step', '?')}): "
                   f"{results['stored_share'] or 0.0:.1%} of the information", fontsize=10)
    parameters = results["parameters"]
    span = np.array([parameters / 10, parameters * 10])  # two decades: labels at each
    for rate, style in ((1, ":"), (2, "--")):
        right.plot(span, rate * span, color="gray", linestyle=style, linewidth=1,
                   label=f"{rate} bit/param")
    right.scatter([parameters], [max(results["bits"], 1.0)], color="tab:blue", zorder=3,
                  label=f"model ({results['bits_per_param']:.3f} bits/param)")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("non-embedding parameters")
    right.set_ylabel("bits stored")
    left.legend(fontsize=8, ncol=3, loc="upper center")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y" if ax is left else "both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_runs(series: dict[str, list[dict]], path: Path) -> None:
    """A sweep's runs: bits stored against non-embedding parameters (log-log), one line per
    series (the sweep's axes but the first, exposures say), with the 1 and 2 bits/param lines
    and the data's information content."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.5))
    ax = fig.subplots()
    points = [run for runs in series.values() for run in runs]
    sizes = [run["parameters"] for run in points]
    span = np.array([min(sizes) / 2, max(sizes) * 2])
    for rate, style in ((1, ":"), (2, "--")):
        ax.plot(span, rate * span, color="gray", linestyle=style, linewidth=1,
                label=f"{rate} bit/param")
    for information in sorted({run["information_bits"] for run in points}):
        ax.axhline(information, color="black", linewidth=0.8,
                   label=f"information content ({information:,.0f} bits)")
    for label, runs in series.items():
        runs = sorted(runs, key=lambda run: run["parameters"])
        ax.plot([run["parameters"] for run in runs], [max(run["bits"], 1.0) for run in runs],
                marker="o", label=label or "runs")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("non-embedding parameters")
    ax.set_ylabel("bits stored")
    ax.set_title("Capacity: bits against parameters", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


register(Task("capacity", CapacityOptions, run, plot, plot_runs))
