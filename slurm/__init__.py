"""The sbatch templates `physlm submit` renders (launch/slurm.py): plain bash scripts with
`{{name}}` placeholders, shipped as package data so that an installed physlm finds them.
An admin reads a template here, or the script rendered from it under `<plan root>/slurm/`."""

import string
from pathlib import Path

ROOT = Path(__file__).resolve().parent


class Template(string.Template):
    """`{{name}}` placeholders, so that the shell's own `$VAR` and `${VAR}` stay as written;
    a `{{` that does not open a placeholder is an error, not silently kept."""

    pattern = r"""\{\{(?:
        (?P<named>[a-z_]+)\}\}
        | (?P<escaped>(?!)) | (?P<braced>(?!))
        | (?P<invalid>))"""


def render(name: str, **values: str) -> str:
    """The template `name` (e.g. `train.sh`) with every placeholder filled; a placeholder left
    without a value raises KeyError."""
    return Template((ROOT / name).read_text()).substitute(values)
