"""The papers' numbers (launch/data/paper_numbers.yaml) beside the shipped configs that produce
their settings: every experiment, suite and sweep file resolved into its runs' config.yaml as
training writes it, and the numbers `physlm report` would put beside each run's metrics."""

from pathlib import Path

import pytest

from corpus_gen.core.config import config_dict
from launch.plan import RunJob, load_plan
from launch.report import Run, paper_beside, read_paper_numbers
from trainer.engine import _flat_config

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "configs" / "experiment").glob("*.yaml")) + sorted(
    (ROOT / "configs" / "sweep").glob("*.yaml"))

MIX_SINGLE, FT_SINGLE, FT_MULTI = 0.866, 0.097, 0.96
EXACT, INVERSE = "qa/test/exact", "reversal/test/inverse_full_name"
BITS = "capacity/bits_per_param"
# (file, run) -> the paper numbers beside its metrics; every run not listed shows none
EXPECTED = {
    ("p31_bios_s_single_mix", "p31_bios_s_single_mix"): {EXACT: MIX_SINGLE},
    **{(f"p31_single_vs_multi{scale}", f"{variant}_finetune"): {EXACT: value}
       for scale in ("", "_paper") for variant, value in (("single", FT_SINGLE),
                                                          ("multi", FT_MULTI))},
    **{(f"p31_celebrity{scale}", run): {EXACT: value} for scale in ("", "_paper")
       for run, value in (("without", 0.044), ("with", 0.868))},
    ("p32_reversal", "p32_reversal"): {INVERSE: 0.0},
    ("p32_reversal_paper", "p32_reversal_paper"): {INVERSE: 0.0},
    ("p21_igsm_med_pq", "p21_igsm_med_pq"): {"igsm/igsm_op23/solution": 0.78},
    ("p21_igsm_hard_pq", "p21_igsm_hard_pq"): {"igsm/igsm_op32/solution": 0.84},
    ("p22_igsm_med_retry", "p22_igsm_med_retry"): {"igsm/igsm_op23/solution": 0.95},
    ("igsm_depth_width_paper", "shape-L12_d768"): {"igsm/igsm_op23/solution": 0.78},
    ("bios_single_vs_multi", "data-single.seed-0"): {EXACT: MIX_SINGLE},
    ("bios_single_vs_multi", "data-single.seed-1"): {EXACT: MIX_SINGLE},
    # Part 3.3: bits per parameter by exposures, MLP and junk
    ("p33_capacity", "p33_capacity"): {BITS: 1.0},
    **{("p33_capacity", f"width-d{d}.exposures-100.seed-0"): {BITS: 1.0}
       for d in (32, 64, 128)},
    **{(sweep, sweep): {BITS: 2.0} for sweep in ("p33_capacity_paper", "p33_capacity_bios_paper")},
    **{(sweep, f"model-{m}.exposures-{e}.seed-0"): {BITS: v}
       for sweep in ("p33_capacity_paper", "p33_capacity_bios_paper")
       for m in ("gpt2_1_4", "gpt2_2_4", "gpt2_4_4", "gpt2_4_8", "gpt2_8_8")
       for e, v in ((100, 1.0), (1000, 2.0))},
    **{("p33_gated_vs_plain_paper", f"model-{m}.mlp-{mlp}.seed-0"): {BITS: v}
       for m in ("gpt2_2_4", "gpt2_4_8") for mlp, v in (("plain", 1.0), ("gated", 0.77))},
    **{("p33_junk_paper", f"data-{data}.seed-0"): {BITS: v}
       for data, v in (("clean", 1.0), ("junk", 0.05), ("junk_domain", 0.5))},
    ("p33_capacity_bios", "p33_capacity_bios"): {BITS: 1.0},
    **{("p33_capacity_bios", f"width-d{d}.seed-0"): {BITS: 1.0} for d in (32, 64, 128)},
}


def produced(job: RunJob, metric: str) -> bool:
    """Whether the run's evaluation writes `metric`: its task is evaluated and, for iGSM, the
    corpus makes the out-of-distribution set it names."""
    task, *rest = metric.split("/")
    experiment = job.experiment
    if task not in experiment.eval.tasks:
        return False
    return task != "igsm" or int(rest[0].removeprefix("igsm_op")) in \
        experiment.corpus.ood_targets


def as_trained(job: RunJob) -> Run:
    """The run as `physlm report` reads it: config.yaml as training writes it, and every metric
    a paper number names that the run's evaluation writes."""
    corpus = job.experiment.corpus
    config = _flat_config(job.experiment, job.corpus.out, {"config": config_dict(corpus)})
    metrics = {p.metric: 0.5 for p in read_paper_numbers() if produced(job, p.metric)}
    return Run(job.run_dir, job.name, config, [], metrics)


@pytest.fixture(scope="module")
def shown(tmp_path_factory) -> dict[tuple[str, str], dict[str, float]]:
    """(file, run) -> {metric: the paper's value beside it} for every run of every shipped
    file."""
    root = tmp_path_factory.mktemp("runs")
    papers = read_paper_numbers()
    found = {}
    for path in SHIPPED:
        for job in load_plan(path, [], str(root / path.stem)).runs:
            beside = paper_beside([as_trained(job)], papers)
            found[(path.stem, job.name)] = {metric: paper.value
                                            for (_, metric), paper in beside.items()}
    return found


def test_each_shipped_run_shows_exactly_the_paper_numbers_of_its_setting(shown):
    assert {key: value for key, value in shown.items() if value} == EXPECTED


def test_every_paper_number_but_one_is_produced_by_a_shipped_config(shown):
    pairs = {(metric, value) for numbers in shown.values() for metric, value in numbers.items()}
    unshipped = {("igsm/igsm_op32/solution", 0.96)}  # iGSM hard with retry data: no config yet
    assert {(p.metric, p.value) for p in read_paper_numbers()} == pairs | unshipped
    assert not pairs & unshipped


def test_mixed_training_shows_the_papers_figure_only_beside_bios_single(shown):
    """Part 3.1's 86.6% is bioS single's: a multi5+permute mixed run (the quickstart) shows no
    paper number, a single one no multi5+permute figure."""
    assert shown[("quickstart", "quickstart")] == {}
    assert shown[("p31_bios_s_multi5_permute_mix", "p31_bios_s_multi5_permute_mix")] == {}
    assert shown[("bios_single_vs_multi", "data-multi5_permute.seed-0")] == {}
    assert shown[("bios_single_vs_multi", "data-single.seed-0")] == {EXACT: MIX_SINGLE}
    assert shown[("p31_single_vs_multi", "single_finetune")] == {EXACT: FT_SINGLE}


def test_every_paper_number_names_its_paper_and_setting():
    for paper in read_paper_numbers():
        assert paper.source.startswith("Part ") and "arXiv:" in paper.source, paper
        assert paper.setting and "SCIENCE" not in paper.source, paper
    text = (ROOT / "launch" / "data" / "paper_numbers.yaml").read_text()
    assert "SCIENCE.md" not in text  # the papers are cited, not a brief outside the repository
