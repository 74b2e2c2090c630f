#!/bin/bash
# physlm gen-array: the training shards of corpus {{corpus}}
#
# A job array: task k generates the training shards RANGES[k] of the corpus (START-STOP:
# shards START to STOP-1), all tasks in parallel, each writing its own shard files. It runs
# after the corpus's prepare job (tokenizer, evaluation sets); the manifest job runs after it.
# A resubmission lists in --array only the tasks with shards still missing.
#
# Rendered by `physlm submit` (launch/slurm.py) from the template slurm/gen_array.sh, for the
# plan {{plan}}; physlm submit writes this file again on every submission, so change the
# template or the slurm config (configs/slurm/, the sweep's `slurm:`), not this file.
{{sbatch}}

set -eo pipefail
cd {{workdir}}
# the setup lines run before `set -u`: module and conda scripts read variables that are unset
{{setup}}
set -u

RANGES=({{ranges}})
range=${RANGES[$SLURM_ARRAY_TASK_ID]}
{{python}} -m launch.cli gen {{config_file}} \
    --out {{out}} --part "shards:$range" --workers {{workers}} --no-progress
