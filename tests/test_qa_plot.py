from matplotlib.backends.backend_agg import FigureCanvasAgg

from trainer.eval.qa import figure, plot


def _split(n: int, exact: list[float], first: list[float]) -> dict:
    attributes = ("birth_date", "birth_city", "university")
    return {"exact": sum(exact) / 3, "first_token": sum(first) / 3, "n": n,
            "per_attribute": {a: {"exact": e, "first_token": f, "n": n // 3}
                              for a, e, f in zip(attributes, exact, first)}}


RESULTS = {"step": 1200, "run": "quickstart",
           "test": _split(300, [0.25, 0.5, 0.0], [0.5, 0.75, 0.25]),
           "train": _split(297, [1.0, 0.75, 0.5], [1.0, 1.0, 0.75])}


def test_bars_show_exact_and_first_token_accuracy_per_split_and_attribute():
    ax = figure(RESULTS).axes[0]
    bars = {c.get_label(): [bar.get_height() for bar in c] for c in ax.containers}
    assert bars == {"test exact match": [0.25, 0.5, 0.0], "test first token": [0.5, 0.75, 0.25],
                    "train exact match": [1.0, 0.75, 0.5], "train first token": [1.0, 1.0, 0.75]}
    hatched = {c.get_label() for c in ax.containers if c[0].get_hatch()}
    assert hatched == {"test first token", "train first token"}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["birth date", "birth city",
                                                           "university"]


def test_title_names_run_and_step_and_legend_gives_n_and_means():
    ax = figure(RESULTS).axes[0]
    assert ax.get_title() == "QA extraction by attribute (quickstart, step 1200)"
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels[:2] == ["test (n=300): exact 25.0%, first token 50.0%",
                          "train (n=297): exact 75.0%, first token 91.7%"]
    assert {"exact match", "first token"} <= set(labels)


def _with_chance(split: dict, exact_chance: list[float], first_chance: list[float]) -> dict:
    per_attribute = {a: {**score, "exact_chance": e, "first_token_chance": f}
                     for (a, score), e, f in zip(split["per_attribute"].items(), exact_chance,
                                                 first_chance)}
    return {**split, "per_attribute": per_attribute}


def test_each_bar_has_its_attributes_chance_as_a_dashed_tick_not_a_line_at_zero():
    # "▁University" begins 38.5% of university answers: first-token chance is not ~0
    results = {"step": 5, "test": _with_chance(RESULTS["test"], [0.0, 0.02, 0.01],
                                               [0.083, 0.04, 0.385])}
    ax = figure(results).axes[0]
    ticks = [c for c in ax.collections if c.get_label() == "chance"]
    heights = sorted(float(segment[0][1]) for tick in ticks for segment in tick.get_segments())
    assert heights == [0.0, 0.01, 0.02, 0.04, 0.083, 0.385]
    assert not [line for line in ax.lines if line.get_label().startswith("chance ~0")]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "chance: always the commonest answer (first token)" in labels


def test_an_empty_split_and_a_missing_attribute_say_no_data_instead_of_a_zero_bar():
    empty = {"exact": None, "first_token": None, "n": 0, "too_long": 0, "per_attribute": {}}
    ax = figure({"step": 5, "test": empty, "train": RESULTS["train"]}).axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels[0] == "test (n=0): no data"
    assert [t.get_text() for t in ax.texts] == ["no data"] * 6  # 3 attributes x 2 metrics
    heights = {c.get_label(): [bar.get_height() for bar in c] for c in ax.containers}
    assert all(h != h for h in heights["test exact match"])  # NaN: no bar, not a 0 bar
    partial = {**RESULTS["test"], "per_attribute": {
        k: v for k, v in RESULTS["test"]["per_attribute"].items() if k != "university"}}
    ax = figure({"step": 5, "test": partial, "train": RESULTS["train"]}).axes[0]
    assert [t.get_text() for t in ax.texts] == ["no data"] * 2  # test's university only


def test_title_without_a_run_name_gives_the_step():
    results = {"step": 7, "test": RESULTS["test"]}
    assert figure(results).axes[0].get_title() == "QA extraction by attribute (step 7)"


def test_legend_sits_below_the_bars():
    fig = figure(RESULTS)
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent().y1 < ax.get_window_extent().y0


def test_plot_writes_a_png(tmp_path):
    plot(RESULTS, tmp_path / "qa.png")
    assert (tmp_path / "qa.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
