#!/bin/bash
# physlm gen-array: the training shards of corpus {{corpus}}
#
# A job array: task k generates the training shards RANGES[k] of the corpus (START-STOP:
# shards START to STOP-1), all tasks in parallel, each writing its own shard files. It runs
# after the corpus's prepare job (tokenizer, evaluation sets); the manifest job runs after it.
# A resubmission lists in --array only the tasks with shards still missing.
{{preamble}}

RANGES=({{ranges}})
range=${RANGES[$SLURM_ARRAY_TASK_ID]}
{{python}} -m launch.cli gen {{config_file}} \
    --out {{out}} --part "shards:$range" --workers {{workers}} --no-progress
