"""One process of the zero section: trains runs of one experiment through trainer.engine.train.

    python3 zero_worker.py --corpus C --experiment E --job RUN_DIR STAGE KILL_AFTER COMPILE ...

Each job trains (or, with resume: auto, resumes) RUN_DIR at train.zero_stage=STAGE, with
train.compile=COMPILE (true/false). With KILL_AFTER > 0 the job prints KILL_LINE once that step
is done and waits: the parent SIGKILLs this process there (so such a job is the process's last).
A job the trainer refuses as bad input (the one line `physlm train` would print) writes that
line to refused_file(RUN_DIR) and the next job runs.
"""

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent)]

from corpus_gen.core.errors import CorpusError  # noqa: E402
from trainer.config import load_experiment  # noqa: E402
from trainer.engine import train  # noqa: E402
from trainer.errors import TrainError  # noqa: E402

KILL_LINE = "physlm-proof: kill me now"


def refused_file(run_dir: Path) -> Path:
    return run_dir.with_name(run_dir.name + ".refused")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--experiment", type=Path, required=True)
    p.add_argument("--job", nargs=4, action="append", required=True,
                   metavar=("RUN_DIR", "STAGE", "KILL_AFTER", "COMPILE"))
    args = p.parse_args()
    for run_dir, stage, kill_after, compiled in args.job:
        def wait_for_kill(step: int, _metrics: dict, kill_after: int = int(kill_after)) -> None:
            if step == kill_after:
                print(KILL_LINE, flush=True)
                time.sleep(3600)

        try:
            experiment = load_experiment(args.experiment, [f"train.zero_stage={stage}",
                                                           f"train.compile={compiled}"])
            train(experiment, Path(run_dir), args.corpus,
                  on_step=wait_for_kill if int(kill_after) > 0 else None)
        except (CorpusError, TrainError) as exc:  # what launch.cli reports as bad input
            refused_file(Path(run_dir)).write_text(str(exc))


if __name__ == "__main__":
    main()
