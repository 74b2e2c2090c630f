#!/bin/bash
# physlm {{kind}}: corpus {{corpus}}
#
# {{purpose}}
# Generation is a pure function of the corpus config: whichever job writes a file writes the
# same bytes as a plain `physlm gen` would, and a file already written and recorded (under
# the corpus's .progress/) is kept.
#
# Rendered by `physlm submit` (launch/slurm.py) from the template slurm/gen.sh, for the plan
# {{plan}}; physlm submit writes this file again on every submission, so change the template
# or the slurm config (configs/slurm/, the sweep's `slurm:`), not this file.
{{sbatch}}

set -eo pipefail
cd {{workdir}}
# the setup lines run before `set -u`: module and conda scripts read variables that are unset
{{setup}}
set -u

{{python}} -m launch.cli gen {{config_file}} \
    --out {{out}} {{part}}--workers {{workers}} --no-progress
