"""The report's figures on the demo cache's report (``data/demo_report.json``, written by
``layercache probe-report runs/demo-cache``): no legend over data, no overlapping or cut labels,
gains on their own axis with their uncertainty, no empty token category."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from layercache.report import figures
from layercache.report.model import ProbeReport

from .figure_checks import figure_problems, legend_overlaps


def _report(data: dict) -> ProbeReport:
    return ProbeReport.from_json(data)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    figures._plt().close("all")


@pytest.mark.parametrize("spec", figures.FIGURES, ids=[spec.key for spec in figures.FIGURES])
def test_no_legend_over_data_and_no_overlapping_or_cut_labels(spec, demo):
    fig = spec.draw(_report(demo))
    if fig is None:
        pytest.skip(f"the demo report has no {spec.key} figure")
    assert figure_problems(fig) == []


def test_the_scores_legend_leaves_the_dotted_control_lines_visible(demo):
    """The issue's case: topic's control line runs along the bottom of the panel, where the legend sat."""
    fig = figures.figure_scores(_report(demo))
    dotted = [line for ax in fig.axes for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 3  # topic, sentiment, negation_scope
    assert legend_overlaps(fig) == []
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "control task (dotted)" in labels and "topic (accuracy)" in labels


def test_the_legend_check_sees_a_legend_over_a_line():
    """The check is not vacuous: a legend placed on a line is reported."""
    plt = figures._plt()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1, 2], [0.1, 0.1, 0.1], ":", label="control")
    ax.plot([0, 1, 2], [0.9, 0.9, 0.9], label="task")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower left")
    assert legend_overlaps(fig)


def _cumulative_axes(fig, task: str):
    """(score axes, gains axes) of ``task``'s column."""
    top = next(ax for ax in fig.axes if ax.get_title().startswith(f"{task}:"))
    column = [ax for ax in fig.axes if ax is not top
              and np.isclose(ax.get_position().x0, top.get_position().x0)]
    assert len(column) == 1, "the gains have their own panel below the score"
    return top, column[0]


def test_cumulative_gains_have_their_own_axis_around_zero(demo):
    fig = figures.figure_cumulative(_report(demo))
    positions = [tuple(np.round(ax.get_position().bounds, 4)) for ax in fig.axes]
    assert len(set(positions)) == len(positions), "no twin axes: score and gains do not share one area"
    top, bottom = _cumulative_axes(fig, "topic")
    assert not top.patches and len(top.get_lines()) >= 1  # the score line alone
    assert len([p for p in bottom.patches]) == len(demo["meta"]["layer_names"])
    assert any(np.allclose(line.get_ydata(), 0) for line in bottom.get_lines())  # the zero line
    low, high = top.get_ylim()
    assert low < 0.924 < high and low > 0.5  # topic's 0.924 reads as 0.924, not as the bottom of the axis
    # intensity's gains of ±0.0001 are not stretched to the panel's height
    _, bottom = _cumulative_axes(fig, "intensity")
    low, high = bottom.get_ylim()
    assert low <= -figures.MIN_GAIN_RANGE and high >= figures.MIN_GAIN_RANGE
    tallest = max(abs(p.get_height()) for p in bottom.patches)
    assert tallest < 0.05 * (high - low)


def test_cumulative_draws_gain_intervals_and_says_when_the_centre_is_noise(demo):
    data = copy.deepcopy(demo)
    for name, t in data["tasks"].items():
        cum = t["cumulative"]
        cum["gain_intervals"] = [None] + [[g - 0.006, g + 0.004] for g in cum["gains"][1:]]
        if name == "intensity":
            cum["expected_layer"] = 0.21
            cum["expected_layer_is_noise"] = True
            cum["noise_note"] = "every gain's interval holds 0: E_Δ is the centre of noise"
    fig = figures.figure_cumulative(_report(data))
    assert figure_problems(fig) == []
    top, bottom = _cumulative_axes(fig, "sentiment")
    bars = [c for c in bottom.containers if getattr(c, "errorbar", None) is not None]
    assert len(bars) == 1
    segments = bars[0].errorbar.lines[2][0].get_segments()
    spans = sorted(round(float(s[1][1] - s[0][1]), 6) for s in segments)
    assert spans.count(0.0) == 1 and spans.count(0.01) == len(segments) - 1  # first prefix: no interval
    top, bottom = _cumulative_axes(fig, "intensity")
    assert top.get_title() == "intensity: E_Δ: gains within noise"
    assert "centre of noise" in bottom.get_title().replace("\n", " ")
    assert not [line for ax in (top, bottom) for line in ax.get_lines() if line.get_linestyle() == ":"]
    sentiment_top, _ = _cumulative_axes(fig, "sentiment")
    assert sentiment_top.get_title() == "sentiment: E_Δ = 2.79"


def test_cumulative_without_intervals_draws_no_error_bars(demo):
    """A report.json written before the intervals existed still renders, without error bars."""
    fig = figures.figure_cumulative(_report(demo))
    for ax in fig.axes:
        assert all(getattr(c, "errorbar", None) is None for c in ax.containers)


def test_token_depth_draws_no_empty_category(demo):
    rows = demo["token_depth"]["by_category"]["families"]["token_type"]
    assert any(r["category"] == "punctuation" and r["count"] == 0 for r in rows)  # the case
    fig = figures.figure_token_depth(_report(demo))
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert "special (2,000)" in labels
    assert not [label for label in labels if label.endswith("(0)")]


def test_token_depth_leaves_out_a_family_with_no_tokens(demo):
    data = copy.deepcopy(demo)
    for row in data["token_depth"]["by_category"]["families"]["word_position"]:
        row.update(count=0, mean=None, std=None)
    fig = figures.figure_token_depth(_report(data))
    assert "word_position" not in [ax.get_title() for ax in fig.axes if ax.get_visible()]


def test_cumulative_with_no_scores_still_draws(demo):
    """A task whose prefix scores are all missing (null) draws empty panels, no error, no warning."""
    data = copy.deepcopy(demo)
    cum = data["tasks"]["intensity"]["cumulative"]
    n = len(cum["scores"])
    cum.update(scores=[None] * n, gains=[None] * n, expected_layer=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.figure_cumulative(_report(data))
    assert fig is not None


def _whisker_ends(fig) -> list[float]:
    """The right ends of every horizontal error bar of the token-depth panels."""
    ends = []
    for ax in fig.axes[1:]:
        for container in ax.containers:
            if getattr(container, "has_xerr", False):
                for segment in container.lines[2][0].get_segments():
                    ends.append(max(x for x, _ in segment))
    return ends


def test_token_depth_whiskers_stay_inside_the_depths_reached(demo):
    """Mean ± sd of the demo's words (5.35 ± 1.78) ran past the deepest depth, 7: whiskers are cut at it."""
    deepest = demo["token_depth"]["histogram"]["edges"][-1]
    ends = _whisker_ends(figures.figure_token_depth(_report(demo)))
    assert ends and max(ends) <= deepest + 1e-9


def test_token_depth_whiskers_span_the_10th_to_90th_percentile(demo):
    data = copy.deepcopy(demo)
    for rows in data["token_depth"]["by_category"]["families"].values():
        for row in rows:
            if row["count"]:
                row.update(p10=row["mean"] - 0.5, p90=row["mean"] + 0.25)
    ends = _whisker_ends(figures.figure_token_depth(_report(data)))
    means = [r["mean"] for rows in data["token_depth"]["by_category"]["families"].values() for r in rows if r["count"]]
    assert sorted(round(e, 9) for e in ends) == sorted(round(m + 0.25, 9) for m in means)


def test_a_probe_mix_that_kept_one_layer_is_labelled_as_that_layer(demo):
    """Every task's full mix in the demo report puts 0.995 or more on one layer: the legend names it, not a mix."""
    data = copy.deepcopy(demo)
    spread = np.full(len(data["meta"]["layer_names"]), 1 / len(data["meta"]["layer_names"]))
    data["tasks"]["intensity"]["cumulative"]["mix_weights"][-1] = spread.tolist()
    fig = figures.figure_layer_weights(_report(data))
    labels = set(fig.legends[0].get_texts()[i].get_text() for i in range(len(fig.legends[0].get_texts())))
    assert {"probe on all layers: topic (kept only layer_6)", "probe on all layers: sentiment (kept only layer_4)",
            "probe on all layers: negation_scope (kept only layer_3)",
            "probe mix of all layers: intensity"} <= labels
    assert not [label for label in labels if label.startswith("probe mix:")]
