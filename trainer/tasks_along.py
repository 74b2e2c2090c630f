"""Evaluation tasks along training (`train.tasks_every`): every so many steps rank 0 runs the
experiment's `eval.tasks` on the live model and the loop logs their numbers beside the loss, as
`tasks/<task>/<key>` (nested results flattened, numbers only), so that a metric's curve shows
when a mechanism forms: an induction head's score, facts stored, the gap to a Bayes loss.

A task's files (plots, generations) go to a temporary directory and are dropped: `physlm eval`
writes the final ones. The model's mode and every random state the process holds (torch's,
numpy's and Python's) are restored afterwards, so a run with tasks along training takes the same
steps as one without.
"""

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.tokenizer import CorpusTokenizer
from trainer.eval.registry import EvalContext, tasks
from trainer.eval.runner import flat_results
from trainer.model import GPT


@dataclass
class TasksAlong:
    model: GPT
    eval_config: Any  # the experiment's eval group: its `tasks` and their options
    corpus_dir: Path
    run_dir: Path
    device: torch.device
    tokenizer: CorpusTokenizer | None = None

    def __call__(self) -> dict[str, float]:
        """Each task's numbers now, as `tasks/<task>/<key>`."""
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(self.corpus_dir, read_manifest(self.corpus_dir))
        known, numbers = tasks(), {}
        training = self.model.training
        python_state, numpy_state = random.getstate(), np.random.get_state()
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices), tempfile.TemporaryDirectory() as out:
                self.model.eval()
                context = EvalContext(self.model, self.tokenizer, self.corpus_dir, self.run_dir,
                                      self.device, Path(out))
                for name in self.eval_config.tasks:
                    result = known[name].run(context, getattr(self.eval_config, name))
                    numbers.update({key: float(value) for key, value
                                    in flat_results(f"tasks/{name}", result).items()
                                    if isinstance(value, int | float)})
        finally:
            self.model.train(training)
            random.setstate(python_state)
            np.random.set_state(numpy_state)
        return numbers
