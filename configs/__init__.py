"""The configs shipped with physlm, found by group and name wherever physlm is installed:
`corpus/bios_s_single.yaml` is the corpus config `bios_s_single`."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
GROUPS = ("corpus", "model", "train", "eval", "experiment", "sweep", "slurm")


def names(group: str) -> list[str]:
    """The shipped configs of `group`, by name."""
    return sorted(path.stem for path in (ROOT / group).glob("*.yaml"))


def find(group: str, name_or_path: str, relative_to: Path | None = None) -> Path | None:
    """The YAML file a user names: a path (relative to `relative_to` if given) that exists, else
    the shipped config of that name in `group`; None if neither exists."""
    given = Path(name_or_path).expanduser()
    path = relative_to / given if relative_to is not None else given
    if path.is_file():
        return path
    shipped = ROOT / group / f"{name_or_path}.yaml"
    return shipped if "/" not in name_or_path and shipped.is_file() else None
