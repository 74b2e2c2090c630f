"""The sbatch templates `physlm submit` renders (launch/slurm_scripts.py): plain bash scripts with
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


PREAMBLE = "preamble.sh"  # what every script shares: the #SBATCH block, cd, setup lines


def render(name: str, **values: str) -> str:
    """The template `name` (e.g. `train.sh`) with every placeholder filled, `{{preamble}}` by
    the shared preamble; a placeholder left without a value raises KeyError."""
    text = (ROOT / PREAMBLE).read_text().split("\n", 2)[2]  # less its own two-line header
    preamble = Template(text).substitute(values, template=name).rstrip("\n")
    return Template((ROOT / name).read_text()).substitute(values, preamble=preamble)
