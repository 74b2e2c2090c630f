# The part every physlm sbatch script shares, rendered into it at {{preamble}}:
# the #SBATCH block, then the directory and the cluster's setup lines.
#
# Rendered by `physlm submit` (launch/slurm.py) from the template slurm/{{template}}, for the
# plan {{plan}}; physlm submit writes this file again on every submission, so change the
# template or the slurm config (configs/slurm/, the sweep's `slurm:`), not this file.
{{sbatch}}

set -eo pipefail
cd {{workdir}}
# the setup lines run before `set -u`: module and conda scripts read variables that are unset
{{setup}}
set -u
{{pythonpath}}
