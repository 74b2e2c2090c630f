"""Planning a big sweep: `load_plan` of an N x N grid (`train.lr` x `seeds`) on the shipped
quickstart experiment (planned, never trained), as `physlm sweep --dry-run` plans it, against
the old way (each run built from the files by `load_experiment`, ~50 ms a run) timed on the
first --old-runs points.

    python bench/bench_plan.py --grid 100 --old-runs 200

Prints seconds of CPU time (time.process_time: other processes on the machine do not count)
and of wall time, per run and for the whole plan (the old way's whole plan extrapolated from
its per-run figure), and checks that the two ways plan equal experiments for the old way's
points; then the same for the text of each run's experiment.yaml (what a launch writes).
"""

import argparse
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import OmegaConf

import launch.sweep_compose
from corpus_gen.core.config import config_dict
from launch.plan import experiment_yaml, load_plan
from trainer.config import load_experiment


def sweep_file(folder: Path, grid: int, seeds: int) -> Path:
    lrs = [round(1e-4 * (i + 1), 6) for i in range(grid)]
    path = folder / "big.yaml"
    path.write_text(f"experiment: quickstart\ngrid: {{train.lr: {lrs}}}\n"
                    f"seeds: {list(range(seeds))}\n")
    return path


def timed(plan_it) -> tuple[object, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    plan = plan_it()
    return plan, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, default=100, help="N: the grid is N lr x N seeds")
    parser.add_argument("--old-runs", type=int, default=200,
                        help="points planned the old way (a divisor-friendly few hundred)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "warm").mkdir()
        load_plan(sweep_file(Path(folder) / "warm", 1, 1), [])  # imports and caches, untimed
        path = sweep_file(Path(folder), args.grid, args.grid)
        plan, cpu, wall = timed(lambda: load_plan(path, []))
        runs = len(plan.runs)
        print(f"fast: {runs} runs in {cpu:.2f} s CPU ({wall:.2f} s wall), "
              f"{1000 * cpu / runs:.2f} ms a run")
        # the old way: the same sweep cut to --old-runs points, each built from the files
        seeds = max(1, min(args.grid, args.old_runs // args.grid or 1))
        grid = max(1, args.old_runs // seeds)
        small = sweep_file(Path(folder), grid, seeds)
        fast = load_plan(small, [])
        composer = launch.sweep_compose.Composer.experiment
        launch.sweep_compose.Composer.experiment = lambda self, o: load_experiment(self.base, o)
        try:
            old, old_cpu, old_wall = timed(lambda: load_plan(small, []))
        finally:
            launch.sweep_compose.Composer.experiment = composer
        per_run = old_cpu / len(old.runs)
        print(f"old:  {len(old.runs)} runs in {old_cpu:.2f} s CPU ({old_wall:.2f} s wall), "
              f"{1000 * per_run:.2f} ms a run; {runs} runs: ~{per_run * runs:.0f} s CPU")
        same = [experiment_yaml(r.experiment) for r in fast.runs] == \
            [experiment_yaml(r.experiment) for r in old.runs] and \
            [r.experiment for r in fast.runs] == [r.experiment for r in old.runs]
        print(f"the same {len(old.runs)} experiments both ways: {same}")
        print(f"speed-up per run: {per_run / (cpu / runs):.0f}x")
        # what a launch then writes of each run: its experiment.yaml
        texts, new_cpu, _ = timed(lambda: [experiment_yaml(r.experiment) for r in fast.runs])
        old_texts, old_cpu, _ = timed(lambda: [omegaconf_yaml(r.experiment) for r in fast.runs])
        print(f"experiment.yaml text: {1000 * new_cpu / len(fast.runs):.2f} ms a run "
              f"(OmegaConf.to_yaml, the old way: {1000 * old_cpu / len(fast.runs):.2f} ms); "
              f"the same text: {texts == old_texts}")


def omegaconf_yaml(experiment) -> str:
    """experiment.yaml's text the old way: a DictConfig built, then dumped."""
    return OmegaConf.to_yaml({
        "name": experiment.name, "corpus": config_dict(experiment.corpus),
        "model": asdict(experiment.model), "train": asdict(experiment.train),
        "eval": OmegaConf.to_container(OmegaConf.structured(experiment.eval))})


if __name__ == "__main__":
    main()
