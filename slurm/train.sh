#!/bin/bash
# physlm train: {{title}}
#
# Trains the runs listed in {{runs_file}}, one line per array task:
# its run directory and corpus directory, separated by a tab. A task runs
#   physlm train RUN/experiment.yaml --run-dir RUN --corpus CORPUS
# on {{nodes}} node(s), one process per GPU, launched by {{launcher}}.
#
# Time limit and preemption: with --signal=B:USR1@N (slurm.signal_seconds), Slurm sends USR1
# to this script N seconds before the time limit. The trap below then creates RUN/.stop; the
# trainer saves a checkpoint at its next step boundary and exits, and the script requeues the
# job, which resumes from that checkpoint (train.resume=auto) and appends to the same log.
{{preamble}}

mapfile -t runs < {{runs_file}}
IFS=$'\t' read -r run_dir corpus <<< "${runs[${SLURM_ARRAY_TASK_ID:-0}]}"

# The first node hosts the rendezvous. The port comes from the job id, so that two jobs sharing
# a node do not collide.
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
MASTER_ADDR=${nodes[0]}
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
# Since Slurm 22.05 srun does not inherit --cpus-per-task from the batch job.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
fi

# USR1 (see above): ask the trainer to save a checkpoint and stop at its next step
stop_requested=0
trap 'stop_requested=1; touch "$run_dir/.stop"' USR1

{{launch}} \
    -m launch.cli train "$run_dir/experiment.yaml" --run-dir "$run_dir" --corpus "$corpus" &
trainer=$!
# `wait` returns 128+10 as soon as the trapped USR1 arrives, the trainer still running or just
# ending: wait again, for its own exit status (bash keeps it until it is asked for).
while :; do
    status=0
    wait "$trainer" || status=$?
    [ "$status" = 138 ] && [ "$stop_requested" = 1 ] || break
done

# A clean stop is recorded in RUN/stopped.json: under torchrun the workers then exit 0 (any other
# code would be reported as a failure), under srun 75. Stopped cleanly on request (the trap
# fired): requeue; stopped otherwise (`touch RUN/.stop`): not done, exit 75. A trainer that
# failed after the request, with no clean stop recorded, failed: its exit status, no requeue.
stopped=0
if [ -f "$run_dir/stopped.json" ] && { [ "$status" = 0 ] || [ "$status" = 75 ]; }; then
    stopped=1
fi
if [ "$stop_requested" = 1 ] && [ "$stopped" = 1 ]; then
    echo "physlm: stopped before the time limit with a checkpoint; requeueing job $SLURM_JOB_ID"
    # recorded first: requeueing ends this script
    end_recorded=1
    record_event requeued
    scontrol requeue "$SLURM_JOB_ID" || { end_recorded=0; exit 1; }
    exit 0
fi
[ "$stopped" = 1 ] && exit 75
exit "$status"
