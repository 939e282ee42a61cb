"""The paired bootstrap: its observed difference is the metrics' own, its spread the sampling noise's."""

import numpy as np
import pytest

from layercache.core.tasks import LabelTask
from layercache.errors import ConfigError
from layercache.heads.scoring.bootstrap import paired_bootstrap
from layercache.heads.scoring.evaluation import Predictions, score
from layercache.heads.scoring.selection import Selection

SENTIMENT = LabelTask("sentiment", "sequence", ("neg", "neu", "pos"))
NER = LabelTask("ner", "token", ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"))
POS = LabelTask("pos", "token", ("NOUN", "VERB", "ADJ"))
SCORE = LabelTask("score", "regression")


def _preds(task, labels):
    return Predictions(task, np.arange(len(labels)), labels)


def _sequence(rng, n, accuracy, classes=3, gold=None):
    gold = rng.integers(0, classes, n) if gold is None else gold
    wrong = rng.random(n) > accuracy
    pred = np.where(wrong, (gold + rng.integers(1, classes, n)) % classes, gold)
    return gold, pred


def _sentences(rng, n, gold=None, noise=0.2):
    """IOB sentences of 3-12 words with entities, and a prediction that flips ``noise`` of the words."""
    if gold is None:
        gold = []
        for _ in range(n):
            tags = np.zeros(rng.integers(3, 13), dtype=np.int64)
            for start in rng.choice(len(tags), size=2, replace=False):
                kind = rng.choice([1, 3])
                tags[start] = kind
                if start + 1 < len(tags) and rng.random() < 0.5:
                    tags[start + 1] = kind + 1
            gold.append(tags)
    pred = [np.where(rng.random(len(g)) < noise, rng.integers(0, 5, len(g)), g) for g in gold]
    return gold, pred


def _observed(selection, tasks, gold, a, b):
    """The selection-score difference as the evaluation itself scores the two heads."""
    def total(side):
        return selection.score({t.name: score(t, gold[t.name], side[t.name]) for t in tasks})
    return total(a) - total(b)


@pytest.mark.parametrize("metric", ["accuracy", "macro_f1", "mcc"])
def test_a_sequence_metric_difference_is_the_metrics_own(metric):
    rng = np.random.default_rng(0)
    gold, pred_a = _sequence(rng, 300, 0.8)
    _, pred_b = _sequence(rng, 300, 0.6, gold=gold)
    pred_b[:40] = 2  # a skew, so macro-F1 and MCC part from accuracy
    sel = Selection({"sentiment": metric}, {"sentiment": 1.0})
    a, b = {"sentiment": _preds(SENTIMENT, pred_a)}, {"sentiment": _preds(SENTIMENT, pred_b)}
    out = paired_bootstrap(sel, [SENTIMENT], {"sentiment": gold}, a, b, resamples=50)
    assert out.difference == pytest.approx(_observed(sel, [SENTIMENT], {"sentiment": gold}, a, b), abs=1e-12)
    assert out.difference > 0 and out.rows == 300 and out.resamples == 50


@pytest.mark.parametrize("task,metric", [(NER, "span_f1"), (NER, "accuracy"), (POS, "macro_f1"), (POS, "mcc")])
def test_a_token_metric_difference_is_the_metrics_own_with_sentences_resampled(task, metric):
    rng = np.random.default_rng(1)
    gold, pred_a = _sentences(rng, 120, noise=0.1)
    gold = [g if task is NER else g % 3 for g in gold]
    pred_a = [p if task is NER else p % 3 for p in pred_a]
    _, pred_b = _sentences(rng, 120, gold=gold, noise=0.3)
    pred_b = [p if task is NER else p % 3 for p in pred_b]
    sel = Selection({task.name: metric}, {task.name: 1.0})
    a, b = {task.name: _preds(task, pred_a)}, {task.name: _preds(task, pred_b)}
    out = paired_bootstrap(sel, [task], {task.name: gold}, a, b, resamples=50)
    assert out.difference == pytest.approx(_observed(sel, [task], {task.name: gold}, a, b), abs=1e-12)
    assert out.rows == 120 and out.p_better > 0.95


@pytest.mark.parametrize("metric", ["pearson", "spearman", "r2"])
def test_a_regression_metric_difference_is_the_metrics_own(metric):
    rng = np.random.default_rng(2)
    gold = rng.normal(size=200)
    pred_a, pred_b = gold + rng.normal(scale=0.5, size=200), 0.5 * gold + rng.normal(scale=1.0, size=200)
    sel = Selection({"score": metric}, {"score": 1.0})
    a, b = {"score": _preds(SCORE, pred_a)}, {"score": _preds(SCORE, pred_b)}
    out = paired_bootstrap(sel, [SCORE], {"score": gold}, a, b, resamples=50)
    assert out.difference == pytest.approx(_observed(sel, [SCORE], {"score": gold}, a, b), abs=1e-9)
    assert out.p_better == 1.0


def test_constant_predictions_score_as_no_skill_as_the_selection_reads_them():
    gold = np.linspace(-1, 1, 50)
    sel = Selection({"score": "pearson"}, {"score": 1.0})
    a, b = {"score": _preds(SCORE, gold * 2)}, {"score": _preds(SCORE, np.full(50, 0.3))}
    out = paired_bootstrap(sel, [SCORE], {"score": gold}, a, b, resamples=20)
    assert out.difference == pytest.approx(1.0)  # pearson 1 against an undefined correlation, read as 0


def test_identical_heads_differ_by_nothing_and_neither_is_better():
    rng = np.random.default_rng(3)
    gold, pred = _sequence(rng, 200, 0.7)
    sel = Selection({"sentiment": "mcc"}, {"sentiment": 1.0})
    same = {"sentiment": _preds(SENTIMENT, pred)}
    out = paired_bootstrap(sel, [SENTIMENT], {"sentiment": gold}, same, same, resamples=100)
    assert (out.difference, out.se, out.p_better) == (0.0, 0.0, 0.5)


def test_the_spread_matches_the_analytic_standard_error_of_a_paired_accuracy_difference():
    # 1000 examples; the heads disagree on 60: a right on 40 of them, b on 20. The difference in
    # accuracy is 0.02, and its standard error sqrt((d_a + d_b) / n^2 - diff^2 / n) is 0.00773.
    gold = np.zeros(1000, dtype=np.int64)
    pred_a, pred_b = gold.copy(), gold.copy()
    pred_b[:40] = 1
    pred_a[40:60] = 1
    pred_a[60:300] = pred_b[60:300] = 2  # wrong together: pairing cancels these
    sel = Selection({"sentiment": "accuracy"}, {"sentiment": 1.0})
    out = paired_bootstrap(sel, [SENTIMENT], {"sentiment": gold}, {"sentiment": _preds(SENTIMENT, pred_a)},
                           {"sentiment": _preds(SENTIMENT, pred_b)}, resamples=2000)
    expected = np.sqrt(60 / 1000**2 - 0.02**2 / 1000)
    assert out.difference == pytest.approx(0.02)
    assert out.se == pytest.approx(expected, rel=0.1)
    assert 0.98 < out.p_better < 1.0  # z = 2.6


def test_a_lead_of_three_examples_in_seven_hundred_is_not_significant():
    # The heads disagree on 37 of 700 examples: a is right on 20 of them, b on 17.
    rng = np.random.default_rng(4)
    two = LabelTask("sentiment", "sequence", ("neg", "pos"))
    gold, pred_b = _sequence(rng, 700, 0.85, classes=2)
    pred_a = pred_b.copy()
    flip = rng.choice(700, 37, replace=False)
    pred_a[flip[:20]], pred_b[flip[:20]] = gold[flip[:20]], 1 - gold[flip[:20]]
    pred_a[flip[20:]], pred_b[flip[20:]] = 1 - gold[flip[20:]], gold[flip[20:]]
    sel = Selection({"sentiment": "accuracy"}, {"sentiment": 1.0})
    out = paired_bootstrap(sel, [two], {"sentiment": gold}, {"sentiment": _preds(two, pred_a)},
                           {"sentiment": _preds(two, pred_b)})
    assert out.difference == pytest.approx(3 / 700)
    assert 0.5 < out.p_better < 0.95


def test_a_joint_head_is_compared_on_the_loss_weighted_mean_with_rows_resampled_together():
    rng = np.random.default_rng(5)
    gold_cls, pred_a_cls = _sequence(rng, 150, 0.9)
    _, pred_b_cls = _sequence(rng, 150, 0.5, gold=gold_cls)
    gold_reg = rng.normal(size=150)
    pred_a_reg, pred_b_reg = gold_reg + rng.normal(size=150), gold_reg + rng.normal(scale=0.3, size=150)
    tasks = [SENTIMENT, SCORE]
    sel = Selection({"sentiment": "accuracy", "score": "pearson"}, {"sentiment": 1.0, "score": 3.0})
    gold = {"sentiment": gold_cls, "score": gold_reg}
    a = {"sentiment": _preds(SENTIMENT, pred_a_cls), "score": _preds(SCORE, pred_a_reg)}
    b = {"sentiment": _preds(SENTIMENT, pred_b_cls), "score": _preds(SCORE, pred_b_reg)}
    out = paired_bootstrap(sel, tasks, gold, a, b, resamples=50)
    assert out.difference == pytest.approx(_observed(sel, tasks, gold, a, b), abs=1e-9)


def test_resampling_is_seeded():
    rng = np.random.default_rng(6)
    gold, pred_a = _sequence(rng, 100, 0.7)
    _, pred_b = _sequence(rng, 100, 0.7, gold=gold)
    sel = Selection({"sentiment": "accuracy"}, {"sentiment": 1.0})
    args = (sel, [SENTIMENT], {"sentiment": gold}, {"sentiment": _preds(SENTIMENT, pred_a)},
            {"sentiment": _preds(SENTIMENT, pred_b)})
    assert paired_bootstrap(*args, seed=1) == paired_bootstrap(*args, seed=1)
    assert paired_bootstrap(*args, seed=1).se != paired_bootstrap(*args, seed=2).se


def test_predictions_over_other_rows_are_refused():
    gold = np.zeros(10, dtype=np.int64)
    sel = Selection({"sentiment": "accuracy"}, {"sentiment": 1.0})
    with pytest.raises(ConfigError, match="same rows"):
        paired_bootstrap(sel, [SENTIMENT], {"sentiment": gold}, {"sentiment": _preds(SENTIMENT, gold)},
                         {"sentiment": _preds(SENTIMENT, gold[:8])})
    with pytest.raises(ConfigError, match="at least one resample"):
        paired_bootstrap(sel, [SENTIMENT], {"sentiment": gold}, {"sentiment": _preds(SENTIMENT, gold)},
                         {"sentiment": _preds(SENTIMENT, gold)}, resamples=0)
