# The part every physlm sbatch script shares, rendered into it at {{preamble}}:
# the #SBATCH block, then the directory and the cluster's setup lines.
#
# Rendered by `physlm submit` (launch/slurm_scripts.py) from the template slurm/{{template}}, for the
# plan {{plan}}; physlm submit writes this file again on every submission, so change the
# template or the slurm config (configs/slurm/, the sweep's `slurm:`), not this file.
{{sbatch}}

# This job's record of itself, for `physlm status` with or without Slurm accounting: a JSON line
# when it starts, and one when it ends with its exit code (or is requeued: train.sh says so).
record={{records}}/${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-}}${SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}.jsonl
record_event() {  # EVENT [', "key": value' ...]; outside Slurm (no job id) nothing to record
    [ -z "${SLURM_JOB_ID:-}" ] || printf '{"event": "%s", "job_id": "%s", "host": "%s", "time": "%s"%s}\n' \
        "$1" "$SLURM_JOB_ID" "${HOSTNAME:-}" "$(date +%Y-%m-%dT%H:%M:%S)" "${2:-}" >> "$record"
}
end_recorded=0
# shellcheck disable=SC2329  # invoked by the EXIT trap below
record_end() {  # on exit: the exit code, unless train.sh recorded a requeue instead
    local code=$?
    [ "$end_recorded" = 1 ] || record_event ended ", \"exit_code\": $code"
}
trap record_end EXIT
trap 'exit 143' TERM  # scancel, a time limit: the exit code says so (128 + 15)
record_event started

set -eo pipefail
cd {{workdir}}
# the setup lines run before `set -u`: module and conda scripts read variables that are unset
{{setup}}
set -u
{{pythonpath}}
