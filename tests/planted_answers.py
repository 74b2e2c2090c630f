"""What the Part 4.1 evaluation tests (depo, brevo, mano) share: a planted model that answers a
prompt by a rule the test gives, and a corpus of nothing but a fixed vocabulary and one eval
set written in the contract's row format."""

import functools
import json
import random
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from corpus_gen.core.vocabulary import Vocabulary
from tests.conftest import record_eval_set, tiny_experiment_file
from tests.planted_lm import PlantedLM
from trainer.config import load_experiment
from trainer.eval.registry import EvalContext, tasks


class AnswerModel(PlantedLM):
    """A planted model: after a prompt ending with the answer marker, it emits `respond(prompt)`
    (token ids) then EOS, one token per step, greedy; before the marker (pads, the prompt
    itself) its logits are flat. `respond` sees only the prompt's ids."""

    def __init__(self, vocab: Vocabulary, marker: str, respond: Callable[[list[int]], list[int]],
                 max_positions: int | None = None):
        super().__init__(vocab.vocab_size, max_positions)
        self.marker, self.eos = vocab.token_id(marker), vocab.eos_id
        self.respond = functools.cache(lambda prompt: list(respond(list(prompt))))

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        if self.marker not in context:
            return
        end = len(context) - context[::-1].index(self.marker)
        reply = [*self.respond(tuple(context[:end])), self.eos]
        emitted = len(context) - end
        out[reply[emitted] if emitted < len(reply) else self.eos] = 1.0

def lookup(rows: list[dict]) -> Callable[[list[int]], list[int]]:
    """The oracle's rule: each row's answer, read off its prompt."""
    answers = {tuple(row["prompt"]): row["answer"] for row in rows}
    return lambda prompt: answers[tuple(prompt)]


def prompt_random(prompt: list[int]) -> random.Random:
    """A generator seeded by the prompt: a planted model's 'random' choice is a function of what
    it reads, as greedy decoding needs."""
    return random.Random(json.dumps(prompt))


def write_set(root: Path, vocab: Vocabulary, name: str, rows: list[dict]) -> Path:
    """A corpus holding `eval/<name>.jsonl` (each row gets its `text` from its ids) as physlm gen
    records it in the manifest."""
    (root / "eval").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({**row, "text": vocab.decode(row["prompt"] + row["answer"])})
             for row in rows]
    (root / "eval" / f"{name}.jsonl").write_text("".join(line + "\n" for line in lines))
    record_eval_set(root, name)
    return root


def context_for(model: nn.Module, vocab: Vocabulary, corpus: Path, run_dir: Path) -> EvalContext:
    return EvalContext(model, vocab, corpus, run_dir, torch.device("cpu"))


def train_and_evaluate(tmp_path: Path, corpus_yaml: str, overrides: list[str], task: str,
                       ctx: int) -> tuple[dict, dict]:
    """`physlm gen` of a shipped corpus config (sized by `overrides`), a few training steps of a
    tiny GPT, then `physlm eval` of `task`: the saved results and the run's report metrics."""
    from corpus_gen.core.config import load_config
    from corpus_gen.core.generate import generate_corpus
    from corpus_gen.core.registry import schemas
    from launch.report import flatten
    from tests.conftest import ROOT
    from trainer.config import load_experiment
    from trainer.engine import train
    from trainer.eval.runner import evaluate

    corpus = tmp_path / "corpus"
    config = load_config(ROOT / "configs" / "corpus" / corpus_yaml, overrides, schemas())
    generate_corpus(config, corpus, progress=False, log=lambda *_: None)
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: t\nmodel:\n  n_layer: 1\n  n_head: 2\n  d_model: 32\n"
                    f"train:\n  ctx: {ctx}\n  micro_batch: 2\n  lr: 0.003\n  warmup_steps: 1\n"
                    f"  max_steps: 2\n  ckpt_every: 2\n  log_every: 1\n"
                    f"  wandb:\n    mode: disabled\neval: {task}\n")
    run_dir = tmp_path / "run"
    train(load_experiment(path, []), run_dir, corpus)
    results = evaluate(run_dir, [task])[task]
    saved = json.loads((run_dir / "eval" / f"{task}.json").read_text())
    assert saved == json.loads(json.dumps(results)) and saved["step"] == 2
    assert (run_dir / "eval" / f"{task}.png").stat().st_size > 0
    assert (run_dir / "eval" / f"{task}_generations.jsonl").is_file()
    return saved, flatten({k: v for k, v in saved.items() if k not in ("run", "step")}, task)


def assert_registered_with_its_shipped_config(tmp_path: Path, name: str, module,
                                              options: type) -> None:
    """Task `name` runs and plots through `module` with `options`, which its shipped
    `configs/eval/<name>.yaml` fills with the defaults."""
    task = tasks()[name]
    assert task.run is module.run and task.plot is module.plot and task.options is options
    experiment = load_experiment(tiny_experiment_file(tmp_path), [f"eval={name}"])
    assert experiment.eval.tasks == [name] and getattr(experiment.eval, name) == options()
