"""The datasheet printed after `physlm gen` and saved as `datasheet.md`."""

from pathlib import Path

from corpus_gen.core.io import atomic_write
from corpus_gen.core.vocabulary import VOCABULARY


def datasheet(manifest: dict, seconds: float, generated: int, out: Path) -> str:
    shards = manifest["shards"]
    records = manifest["records"]
    tokens = manifest["tokens"]
    tokenizer = manifest["tokenizer"]
    per_sample = manifest["config"].get("docs_per_sample", 1)
    rows = [("corpus", str(out)), ("family", manifest["family"]),
            ("fingerprint", manifest["fingerprint"])]
    rows += [(key.replace("_", " "), f"{value:,}") for key, value in manifest["summary"].items()]
    rows += [
        ("documents", f"{records:,}"),
        ("tokens", f"{tokens:,}"),
        ("document length (tokens) mean / min / max",
         f"{tokens / max(records, 1):.1f} / {min(s['min_tokens'] for s in shards)} / "
         f"{max(s['max_tokens'] for s in shards)}"),
        ("vocabulary", f"{tokenizer['vocab_size']:,}"
         + (f" (fixed: {VOCABULARY})" if tokenizer["name"] == VOCABULARY else "")),
        ("shards", f"{len(shards):,}"),
        *([("documents per tar sample", f"up to {per_sample:,}")] if per_sample > 1 else []),
        ("eval sets", ", ".join(f"{e['name']} ({e['records']:,})" for e in manifest["eval"])),
        ("seconds", f"{seconds:.2f}"),
        ("documents generated this run", f"{generated:,}"),
        ("records/s", f"{generated / seconds:,.0f}" if generated and seconds > 0 else "-"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = ["| what | value |", "|---|---|"] + [f"| {k:<{width}} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def write_datasheet(out: Path, text: str) -> None:
    atomic_write(out / "datasheet.md", ("# Datasheet\n\n" + text).encode())
