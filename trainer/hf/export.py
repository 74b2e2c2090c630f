"""`physlm export RUN [--checkpoint STEP] --out DIR`: a checkpoint as a HF transformers model.

DIR gets what `AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)`
read: config.json, model.safetensors (plain tensors, nothing pickled), generation_config.json
(greedy, stopping at the corpus's EOS) and the corpus's tokenizer (tokenizer.py), plus
`physlm_export.json`, which says what was exported (and with which transformers) and marks DIR as
an export that a later one may replace. Every check and conversion runs before any directory is
made; the files are written into a directory beside DIR, which takes DIR's place only once whole.

Exports are for transformers >= 5 (the `hf` extra's floor): transformers 5 writes the rotary
settings into config.json as `rope_parameters`, which transformers 4 does not read.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.io import read_json_file
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.tokenizer import CorpusTokenizer
from trainer import checkpoint
from trainer.errors import TrainError
from trainer.hf.layouts import Layout, hf_config, layout_for
from trainer.model.config import ModelConfig
from trainer.run_dir import (
    CHECKPOINTS,
    META,
    checkpoint_steps,
    latest_checkpoint,
    read_run_config,
)

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedConfig, PreTrainedTokenizerFast

RECORD = "physlm_export.json"
WEIGHTS_FILE = "model.safetensors"
INSTALL = "pip install -e '.[hf]'"


def export_run(run_dir: Path, out: Path, step: int | None = None,
               corpus_dir: Path | None = None) -> dict:
    """Export the checkpoint of `step` (default: the latest) of the run in `run_dir` to `out`;
    return what `physlm_export.json` records. TrainError (one line) for a run, step, model or
    output directory that cannot be exported, with nothing written."""
    _require_hf()
    _refuse_foreign(out)
    if not run_dir.is_dir():
        raise TrainError(f"{run_dir}: no such run directory")
    path = _checkpoint(run_dir, step)
    meta = checkpoint.read_meta(path)
    config, layout, state = _weights(path)
    corpus = corpus_dir or _run_corpus(run_dir)
    tokenizer = _corpus_tokenizer(corpus, meta["tokenizer_sha256"], run_dir,
                                  given=corpus_dir is not None)
    converted = _convert(config, layout, state, tokenizer)
    record = {"run_dir": str(run_dir.resolve()), "step": meta["step"],
              "checkpoint": str(path.resolve()), "hf_class": layout.hf_class,
              "model_config": dataclasses.asdict(config), "corpus_dir": str(corpus.resolve()),
              "tokenizer_sha256": meta["tokenizer_sha256"],
              "transformers_version": converted.transformers_version}
    staged = _staging_dir(out)
    try:
        _write(staged, converted, record)
        _put_in_place(staged, out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return record


@dataclass(frozen=True)
class Converted:
    """What DIR gets, built (and so checked) before any directory is made."""
    tokenizer: PreTrainedTokenizerFast
    config: PreTrainedConfig
    generation: GenerationConfig
    state: dict[str, torch.Tensor]  # HF's names and shapes
    transformers_version: str


def _require_hf() -> None:
    try:
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise TrainError(f"physlm export needs HF transformers, tokenizers and safetensors "
                         f"({exc.name} is not installed): {INSTALL}") from None


def _refuse_foreign(out: Path) -> None:
    """Refuse an `out` that exists and is not a directory, an empty one or an earlier export."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise TrainError(f"--out {out}: exists and is not a directory; choose another")
    if out.is_dir() and any(out.iterdir()) and not _is_export(out):
        raise TrainError(f"--out {out}: holds files that are not a physlm export (no valid "
                         f"{RECORD}); choose another directory or empty it")


def _is_export(directory: Path) -> bool:
    try:
        record = read_json_file(directory / RECORD, TrainError)
    except (OSError, TrainError):
        return False
    return {"run_dir", "step", "hf_class"} <= set(record)


def _checkpoint(run_dir: Path, step: int | None) -> Path:
    """The checkpoint of `step` (None: the one `latest` names)."""
    checkpoints = run_dir / CHECKPOINTS
    if step is None:
        path = latest_checkpoint(checkpoints)
        if path is None:
            raise TrainError(f"{run_dir}: no checkpoint to export (no {CHECKPOINTS}/latest)")
        return path
    path = checkpoints / checkpoint.tag(step)
    if not (path / META).is_file():
        steps = sorted(found for p, found in checkpoint_steps(checkpoints).items()
                       if (p / META).is_file())
        there = ", ".join(map(str, steps)) if steps else "none"
        raise TrainError(f"--checkpoint {step}: {run_dir} has no checkpoint of that step "
                         f"(its checkpoints: {there})")
    return path


def _weights(path: Path) -> tuple[ModelConfig, Layout, dict[str, torch.Tensor]]:
    """The checkpoint's model config, its layout and its state dict, once the model is known to
    map and the state dict to fit the config. The backend the run trained with does not matter:
    a run trained with flash_attn exports on a machine without it."""
    config, state = checkpoint.checkpoint_weights(path, attention="auto")
    return config, layout_for(config), state


def _run_corpus(run_dir: Path) -> Path:
    try:
        return Path(read_run_config(run_dir)["corpus_dir"])
    except (KeyError, TypeError):
        raise TrainError(f"{run_dir}: damaged run config: no corpus_dir") from None


def _corpus_tokenizer(corpus: Path, sha256: str, run_dir: Path, given: bool) -> CorpusTokenizer:
    named = f"--corpus {corpus}" if given else f"{corpus} ({run_dir}'s corpus_dir)"
    if not corpus.is_dir():
        raise TrainError(f"{named}: no such corpus directory"
                         + ("" if given else "; pass the run's corpus with --corpus"))
    manifest = read_manifest(corpus)
    if manifest["tokenizer"]["sha256"] != sha256:
        raise TrainError(f"{named}: its tokenizer differs from the one {run_dir} was trained "
                         "with; pass the run's corpus with --corpus")
    return load_tokenizer(corpus, manifest)


def _convert(config: ModelConfig, layout: Layout, state: dict[str, torch.Tensor],
             tokenizer: CorpusTokenizer) -> Converted:
    """The HF tokenizer, config, generation config and state dict; TrainError (one line) for
    what does not convert."""
    import transformers
    from transformers import AutoConfig, GenerationConfig

    from trainer.hf.tokenizer import hf_tokenizer
    from trainer.hf.weights import hf_state_dict

    hf_tok = hf_tokenizer(tokenizer)
    eos, pad = hf_tok.eos_token_id, hf_tok.pad_token_id
    generation = GenerationConfig(bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
                                  do_sample=False, num_beams=1)
    generation.validate(strict=True)  # as its save_pretrained will, refusing to write
    return Converted(
        tokenizer=hf_tok,
        config=AutoConfig.for_model(layout.name, **hf_config(config, layout, eos, pad)),
        generation=generation, state=hf_state_dict(config, layout, state),
        transformers_version=transformers.__version__)


def _staging_dir(out: Path) -> Path:
    """A new empty directory beside `out` (its parents made as needed), its mode from the umask
    as any mkdir's: it becomes `out` (tempfile.mkdtemp's would be 0700, readable by its owner
    alone)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = out.with_name(f".{out.name}-export-{secrets.token_hex(8)}")
    staged.mkdir()
    return staged


def _write(directory: Path, converted: Converted, record: dict) -> None:
    from safetensors.torch import save_file

    converted.tokenizer.save_pretrained(directory)
    converted.config.save_pretrained(directory)
    converted.generation.save_pretrained(directory)
    (directory / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    save_file(converted.state, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    # safetensors writes a temporary file (mode 0600) and renames it; the weights get the mode
    # of every other file here instead, the umask's
    shutil.copymode(directory / RECORD, directory / WEIGHTS_FILE)


def _put_in_place(staged: Path, out: Path) -> None:
    """Move the finished export to `out`; an earlier export (or an empty directory) there goes,
    and comes back if the move fails."""
    if not out.exists():
        staged.rename(out)
        return
    old = staged.with_name(f"{staged.name}-replaced")
    out.rename(old)
    try:
        staged.rename(out)
    except BaseException:
        old.rename(out)
        raise
    shutil.rmtree(old)
