"""Cumulative scoring gains with a paired bootstrap interval each, and E_Δ called noise when it is."""

from __future__ import annotations

import numpy as np

from layercache.report.cumulative_gains import gain_intervals, prefix_scores


def test_a_real_gain_has_an_interval_above_zero_and_a_tie_one_around_it():
    rng = np.random.default_rng(0)
    target = rng.integers(0, 2, 2000)
    p0 = np.where(rng.random(2000) < 0.6, target, 1 - target)  # 60 % right
    p1 = np.where(rng.random(2000) < 0.9, target, 1 - target)  # 90 % right: a gain of ~0.3
    right, wrong = np.nonzero(p1 == target)[0], np.nonzero(p1 != target)[0]
    flip = np.concatenate([right[:15], wrong[:15]])
    p2 = p1.copy()
    p2[flip] = 1 - p2[flip]  # 15 examples turn wrong, 15 right: the same score, no gain
    predicted = np.stack([p0, p1, p2])
    intervals = gain_intervals(predicted, target, "classification", seed=0)
    assert intervals[0] is None
    assert 0.2 < intervals[1][0] < intervals[1][1] < 0.4
    assert intervals[2][0] < 0 < intervals[2][1]
    np.testing.assert_allclose(prefix_scores(predicted, target, "classification"),
                               (predicted == target).mean(1))


def test_r2_gains_resample_errors_with_their_targets():
    rng = np.random.default_rng(1)
    y = rng.normal(size=1500)
    good, better = y + rng.normal(scale=1.0, size=1500), y + rng.normal(scale=0.3, size=1500)
    predicted = np.stack([good, better])
    scores = prefix_scores(predicted, y, "regression")
    expected = 1 - ((predicted - y) ** 2).sum(1) / ((y - y.mean()) ** 2).sum()
    np.testing.assert_allclose(scores, expected)
    (lo, hi) = gain_intervals(predicted, y, "regression", seed=0)[1]
    assert lo > 0 and lo < scores[1] - scores[0] < hi


def test_report_fields_and_noise_flag(built_report):
    report, _ = built_report
    for name, t in report.tasks.items():
        cum = t["cumulative"]
        intervals = cum["gain_intervals"]
        assert len(intervals) == len(cum["scores"]) and intervals[0] is None, name
        for gain, (lo, hi) in zip(cum["gains"][1:], intervals[1:]):
            assert lo <= hi and lo - 1e-9 <= gain <= hi + 1e-9 or abs(gain) < 0.05, (name, gain, lo, hi)
        noise = not any(lo > 0 for lo, _ in intervals[1:])
        assert cum["expected_layer_is_noise"] is noise, name
        assert (cum["noise_note"] is not None) is noise and (not noise or "bootstrap interval" in cum["noise_note"])


def test_the_summary_calls_a_noise_expected_layer_noise(built_report):
    from rich.console import Console

    from layercache.report.summary import render_probe_summary, summary_rows

    report, _ = built_report
    report = type(report).from_json(report.to_json())
    name = next(iter(report.tasks))
    cum = report.tasks[name]["cumulative"]
    cum["expected_layer"], cum["expected_layer_is_noise"] = 2.5, True
    cum["noise_note"] = "No layer's gain is above zero beyond its 95 % bootstrap interval, so E_Δ (2.50) is noise."
    header, rows = summary_rows(report)
    assert rows[0][header.index("E_Δ (cumulative)")] == "noise (2.50)"
    console = Console(record=True, width=200)
    render_probe_summary(report, console)
    assert f"{name}: No layer's gain is above zero" in console.export_text()


def test_intervals_under_a_small_memory_budget_are_the_same():
    """The resamples are drawn in runs that fit the budget (CoNLL's 51k words took 0.8 GB at once), from one
    generator in turn: the same stream, so the same intervals."""
    from layercache.core.memory import memory_limit

    rng = np.random.default_rng(1)
    target = rng.integers(0, 3, 2_000)
    predicted = np.where(rng.random((4, 2_000)) < np.array([[0.5], [0.6], [0.7], [0.7]]), target, (target + 1) % 3)
    whole = gain_intervals(predicted, target, "token", seed=3)  # 1,000 resamples
    with memory_limit(64 << 20):  # the smallest budget: 1/8 of it over 2,000 words x 16 bytes is 262 resamples a run
        in_runs = gain_intervals(predicted, target, "token", seed=3)
    assert in_runs == whole
