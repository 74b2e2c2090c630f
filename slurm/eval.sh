#!/bin/bash
# physlm eval: {{title}}
#
# Evaluates the runs listed in {{runs_file}}, one line per array task:
# its run directory and corpus directory, separated by a tab. A task runs
#   physlm eval RUN --corpus CORPUS
# on the run's latest checkpoint, with the tasks of the run's eval.tasks, on one GPU. An
# evaluation array of a training array starts each task when the training task of the same
# index has finished (--dependency=aftercorr).
{{preamble}}

mapfile -t runs < {{runs_file}}
IFS=$'\t' read -r run_dir corpus <<< "${runs[${SLURM_ARRAY_TASK_ID:-0}]}"
{{python}} -m launch.cli eval "$run_dir" --corpus "$corpus"
