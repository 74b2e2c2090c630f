"""`physlm gen`: config -> tokenizer -> shards and eval sets (in parallel) -> manifest.

Shard i holds stream positions [i*R, (i+1)*R) and is a pure function of (config, i), so any
number of worker processes writes the same bytes. A rerun keeps every file whose progress record
still verifies and regenerates the rest; the manifest is written last. The steps, in order, each
in its module: what earlier runs left (resume.py), the tokenizer (corpus_tokenizer.py), the shards
and eval sets (write.py), then here the manifest and the datasheet.

A corpus can also be written in parts, each a job of its own (a Slurm array): "prepare" (the
tokenizer, the family's files, the eval sets), then "shards" parts of disjoint shard ranges at
the same time, then a full gen that finds them done and writes the manifest: the same bytes as
one run.
"""

import gc
import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from corpus_gen import __version__
from corpus_gen.core.config import CorpusConfig, config_dict, fingerprint
from corpus_gen.core.corpus_tokenizer import (
    prepare_tokenizer,
    prepared_tokenizer,
    refuse_tokenizer_options,
    tokenizer_name,
)
from corpus_gen.core.datasheet import datasheet, write_datasheet
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import (
    LOCK,
    atomic_write,
    busy,
    directory_lock,
    lock_holder,
    read_json_file,
)
from corpus_gen.core.manifest import FORMAT, MANIFEST, PROGRESS, write_json
from corpus_gen.core.records import Document
from corpus_gen.core.registry import get_family
from corpus_gen.core.resume import kept_entry, prepare_output
from corpus_gen.core.write import Job, run_jobs

# The version of what the core writes (tar layout, tokenizer training, eval-set encoding): it
# enters every corpus fingerprint with the family's own version. Bump it when core output changes.
CORE_VERSION = 1


def shard_name(index: int) -> str:
    return f"train/shard-{index:06d}.tar"


def generator_version(config: CorpusConfig) -> str:
    """The code version a corpus depends on: the core's output format and the family's."""
    family = get_family(config.family)
    return f"core-{CORE_VERSION}/{family.name}-{family.version}"


def corpus_fingerprint(config: CorpusConfig) -> str:
    """Identifies a corpus: the same config, generator versions and family files (a CFG corpus's
    grammar, which may come from a user's file the config only names) give the same bytes."""
    family = get_family(config.family)
    files = family.files(config) if family.files else {}
    inputs = "".join(f"/{name}:{hashlib.sha256(data).hexdigest()}"
                     for name, data in sorted(files.items()))
    return fingerprint(config, generator_version(config) + inputs)


@dataclass(frozen=True)
class Part:
    """A piece of a corpus that a job of its own writes (a Slurm array task): "prepare" the
    tokenizer, the family's files and the eval sets; "shards" the training shards with index in
    [start, stop). Neither writes the manifest: a full gen afterwards finds every part done,
    regenerates what a failed part left missing, and writes it."""

    kind: str
    start: int = 0
    stop: int = 0

    def __post_init__(self):
        if self.kind != "prepare" and not (self.kind == "shards" and 0 <= self.start < self.stop):
            raise CorpusError(f"{self!r}: not a part of a corpus; expected Part('prepare') or "
                              "Part('shards', start, stop) with 0 <= start < stop")

    def __str__(self) -> str:
        return self.kind if self.kind == "prepare" else f"shards:{self.start}-{self.stop}"


def parse_part(text: str) -> Part:
    """`prepare` or `shards:START-STOP` (STOP exclusive) as a Part."""
    match = re.fullmatch(r"prepare|shards:([0-9]+)-([0-9]+)", text)
    if match and match[1] is None:
        return Part("prepare")
    if match and int(match[1]) < int(match[2]):
        return Part("shards", int(match[1]), int(match[2]))
    raise CorpusError(f"part {text!r}: expected 'prepare' or 'shards:START-STOP' (whole numbers, "
                      "START < STOP, STOP exclusive)")


def shard_count(config: CorpusConfig) -> int:
    """How many training shards the corpus of `config` has."""
    records = get_family(config.family).layout(config).records
    return -(-records // config.records_per_shard)


def generate_corpus(config: CorpusConfig, out: Path, workers: int = 1,
                    progress: bool | None = None, log=print, part: Part | None = None
                    ) -> dict | None:
    """Generate (or repair) the corpus of `config` in `out`; return the manifest. Given a `part`,
    generate (or repair) only that part's files and return None."""
    if workers < 1:
        raise CorpusError(f"workers={workers}: must be >= 1")
    refuse_tokenizer_options(config)
    _check_output(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorpusError(f"{out}: cannot write the output directory: "
                          f"{exc.strerror or exc}") from None
    what = "physlm gen" + (f" part {part}" if part else "")
    with directory_lock(out, what, _lock_name(part)):
        _refuse_overlapping_writers(out, part)
        # What was imported before (torch's ~150,000 objects in `physlm run`) stays out of the
        # full collections generation triggers, each of which would otherwise walk it again.
        gc.freeze()
        try:
            return _generate(config, out, workers, progress, log, part)
        finally:
            gc.unfreeze()


# `.lock` (a full gen), `.lock-prepare`, `.lock-shards-000000-000004` (parts)
_LOCK_NAME = re.compile(re.escape(LOCK) + r"(-prepare|-shards-([0-9]+)-([0-9]+))?")


def _lock_name(part: Part | None) -> str:
    if part is None:
        return LOCK
    if part.kind == "prepare":
        return f"{LOCK}-prepare"
    return f"{LOCK}-shards-{part.start:06d}-{part.stop:06d}"


def _refuse_overlapping_writers(out: Path, part: Part | None) -> None:
    """Refuse to start beside a live writer that may write the same files or remove their
    temporaries: any other writer but a shards part of a disjoint range (another task of the
    array). Each writer takes its own lock before it looks at the others', so of two that start
    together at least one sees the other."""
    for path in out.glob(f"{LOCK}*"):
        other = _LOCK_NAME.fullmatch(path.name)
        if not other or path.name == _lock_name(part) or _disjoint(part, other):
            continue
        holder = lock_holder(path)
        if holder:
            raise busy(out, holder)
        if part is None:  # a killed part's lock file: the full gen, alone here, tidies it away
            path.unlink(missing_ok=True)


def _disjoint(part: Part | None, lock: re.Match) -> bool:
    """Whether `part` and the writer of a lock file are shards parts of disjoint ranges."""
    if part is None or part.kind != "shards" or lock[2] is None:
        return False
    return int(lock[3]) <= part.start or part.stop <= int(lock[2])


def _generate(config: CorpusConfig, out: Path, workers: int, progress: bool | None, log,
              part: Part | None) -> dict | None:
    began = time.perf_counter()
    family = get_family(config.family)
    layout = family.layout(config)
    fp = corpus_fingerprint(config)
    prepares = part is None or part.kind == "prepare"
    files = family.files(config) if prepares and family.files else {}
    eval_sets = list(family.eval_sets(config)) if prepares else []
    indices = _shard_indices(shard_count(config), part)
    names = [*([tokenizer_name(config)] if prepares else []), *files,
             *map(_eval_name, eval_sets), *map(shard_name, indices)]
    recorded = prepare_output(out, fp, log, _lock_name(part), None if part is None else names)
    # the tokenizer-sample documents kept for the shards (one worker, whole corpus)
    kept: dict[int, Document] | None = {} if workers == 1 and part is None else None
    if prepares:
        tokenizer_entry = prepare_tokenizer(config, family, layout, out, fp, recorded, log, kept)
    else:
        tokenizer_entry = prepared_tokenizer(config, out, fp, recorded)
    for name, data in files.items():  # a few KB: written again on every run
        atomic_write(out / name, data)

    per_shard = config.records_per_shard
    jobs, entries = [], {}
    for index in indices:
        name = shard_name(index)
        entry = kept_entry(out, name, fp, recorded, log)
        if entry and entry.get("tokenizer") == tokenizer_entry["sha256"]:
            entries[name] = entry
            continue
        start = index * per_shard
        jobs.append(Job(config, str(out), fp, name, start, min(start + per_shard,
                                                                  layout.records)))
    for set_name in eval_sets:
        name = _eval_name(set_name)
        entry = kept_entry(out, name, fp, recorded, log)
        if entry:
            entries[name] = entry
        else:
            jobs.insert(0, Job(config, str(out), fp, name, eval_set=set_name))

    generated = sum(job.stop - job.start for job in jobs)
    hide = None if progress is None else not progress  # None: show on a terminal only
    bar = tqdm(total=generated, unit="doc", unit_scale=True, disable=hide, file=sys.stderr)
    for entry in run_jobs(jobs, workers, kept):
        entries[entry["name"]] = entry
        bar.update(entry.get("stop", 0) - entry.get("start", 0))
    bar.close()
    if part:
        log(f"{out}: part {part}: generated {len(jobs)} files ({generated:,} documents), kept "
            f"{len(entries) - len(jobs)}")
        return None

    shards = [entries[shard_name(i)] for i in indices]
    manifest = {
        "format": FORMAT,
        "family": config.family,
        "version": generator_version(config),
        "package_version": __version__,
        "fingerprint": fp,
        "seed": config.seed,
        "config": config_dict(config),
        "records": sum(s["records"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "summary": layout.summary,
        "tokenizer": tokenizer_entry,
        "shards": shards,
        "eval": [entries[_eval_name(s)] for s in eval_sets],
    }
    if files:
        manifest["files"] = [{"name": name, "sha256": hashlib.sha256(data).hexdigest(),
                              "fingerprint": fp} for name, data in files.items()]
    write_json(out / MANIFEST, manifest)
    seconds = time.perf_counter() - began
    sheet = datasheet(manifest, seconds, generated, out)
    write_datasheet(out, sheet)
    log(sheet)
    return manifest


def _eval_name(set_name: str) -> str:
    return f"eval/{set_name}.jsonl"


def _shard_indices(count: int, part: Part | None) -> range:
    """The shards a run writes: all of them (full gen), none (prepare) or the part's range,
    clipped to the corpus (an array may have more tasks than the corpus shards)."""
    if part is None:
        return range(count)
    if part.kind == "prepare":
        return range(0)
    return range(min(part.start, count), min(part.stop, count))


def _check_output(out: Path) -> None:
    """Refuse, before writing anything, a path that is a file or a foreign non-empty directory."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")
    if out.is_dir() and not _written_by_physlm(out) and any(not _LOCK_NAME.fullmatch(p.name)
                                                          for p in out.iterdir()):
        raise CorpusError(f"{out}: not empty and not a physlm corpus directory; refusing to "
                          "write into it (choose another --out)")


def _written_by_physlm(out: Path) -> bool:
    """Whether `out` holds physlm's progress records or a manifest.json in physlm's format: a
    manifest.json of anything else (a web app's, say) does not make it a corpus to repair."""
    if (out / PROGRESS).is_dir():
        return True
    try:
        manifest = read_json_file(out / MANIFEST)
    except (FileNotFoundError, CorpusError):
        return False
    return manifest.get("format") == FORMAT and "fingerprint" in manifest


