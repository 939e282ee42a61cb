"""Model selection: the epoch a metric prefers, per-task defaults, and metrics refused where they cannot apply."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import tiny_builtin_cache

import layercache as lc
from layercache.core.tasks import LabelTask
from layercache.errors import ConfigError
from layercache.heads import LayerHead, evaluate_run, train_head
from layercache.heads.scoring.selection import (
    SELECTION_METRICS,
    Selection,
    best_epoch,
    default_metric,
    default_selection,
    metrics_for,
    requested_metrics,
    resolve_selection,
    select_epoch,
)

SENTIMENT = LabelTask("sentiment", "sequence", ("neg", "pos"))
NER = LabelTask("ner", "token", ("O", "B-PER", "I-PER"))
SCOPE = LabelTask("scope", "token", ("O", "CUE", "SCOPE"))
INTENSITY = LabelTask("intensity", "regression")

# Validation metrics of four epochs of a head that drifts toward the majority class: its accuracy
# peaks at epoch 3 (predicting "neg" more often), its MCC at epoch 2.
HISTORY = [
    {"sentiment": {"accuracy": 0.70, "macro_f1": 0.60, "mcc": 0.30}},
    {"sentiment": {"accuracy": 0.78, "macro_f1": 0.72, "mcc": 0.45}},
    {"sentiment": {"accuracy": 0.81, "macro_f1": 0.55, "mcc": 0.20}},
    {"sentiment": {"accuracy": 0.80, "macro_f1": 0.45, "mcc": 0.00}},
]


def only(task: LabelTask, metric: str) -> Selection:
    return resolve_selection([task], {task.name: metric}, {task.name: 1.0})


@pytest.mark.parametrize(("metric", "epoch"), [("accuracy", 3), ("mcc", 2), ("macro_f1", 2)])
def test_the_kept_epoch_is_the_one_the_chosen_metric_prefers(metric, epoch):
    assert select_epoch(HISTORY, only(SENTIMENT, metric)) == epoch


def test_ties_keep_the_earliest_epoch_and_nan_never_wins():
    assert best_epoch([0.5, 0.7, 0.7, 0.6]) == 2
    assert best_epoch([math.nan, 0.1, math.nan]) == 2
    assert best_epoch([]) == 0


def test_a_joint_head_selects_on_the_loss_weighted_mean_of_each_tasks_metric():
    history = [
        {"sentiment": {"mcc": 0.50}, "intensity": {"pearson": 0.20, "r2": 0.00}},
        {"sentiment": {"mcc": 0.30}, "intensity": {"pearson": 0.50, "r2": 0.20}},
    ]
    asked = {"sentiment": "mcc", "intensity": "pearson"}
    equal = resolve_selection([SENTIMENT, INTENSITY], asked, {"sentiment": 1.0, "intensity": 1.0})
    assert equal.score(history[0]) == pytest.approx(0.35) and equal.score(history[1]) == pytest.approx(0.40)
    assert select_epoch(history, equal) == 2
    leaning = resolve_selection([SENTIMENT, INTENSITY], asked, {"sentiment": 3.0, "intensity": 1.0})
    assert leaning.score(history[0]) == pytest.approx((3 * 0.5 + 0.2) / 4)
    assert select_epoch(history, leaning) == 1
    assert leaning.describe() == "loss-weighted mean of sentiment mcc, intensity pearson"


def test_an_undefined_metric_counts_as_no_skill():
    # Constant predictions: Pearson is NaN, which reads as 0 rather than poisoning the mean.
    selection = only(INTENSITY, "pearson")
    assert selection.score({"intensity": {"pearson": math.nan}}) == 0.0
    assert math.isnan(selection.values({"intensity": {"pearson": math.nan}})["intensity"])


def test_defaults_per_task():
    assert default_metric(SENTIMENT, np.array([500, 500]))[0] == "accuracy"
    assert default_metric(SENTIMENT, np.array([550, 450]))[0] == "accuracy"
    name, why = default_metric(SENTIMENT, np.array([600, 400]))
    assert name == "mcc" and "'neg'" in why and "60%" in why
    assert default_metric(SENTIMENT, np.array([10, 0]))[0] == "mcc"  # a class train never shows
    assert default_metric(SENTIMENT)[0] == "accuracy"  # no counts: taken as balanced
    assert default_metric(NER)[0] == "span_f1"
    assert default_metric(SCOPE)[0] == "macro_f1"
    assert default_metric(INTENSITY)[0] == "pearson"
    selection = default_selection([SENTIMENT, NER, INTENSITY])
    assert selection.metrics == {"sentiment": "accuracy", "ner": "span_f1", "intensity": "pearson"}


def test_every_metric_knows_where_it_applies():
    assert metrics_for(SENTIMENT) == ["accuracy", "macro_f1", "mcc"]
    assert metrics_for(NER) == ["accuracy", "macro_f1", "mcc", "span_f1"]
    assert metrics_for(SCOPE) == ["accuracy", "macro_f1", "mcc"]
    assert metrics_for(INTENSITY) == ["pearson", "spearman", "r2"]
    assert all(metric.kinds for metric in SELECTION_METRICS.values())


def test_asked_metrics_override_the_default_per_task():
    asked = requested_metrics({"intensity": "r2"}, [SENTIMENT, INTENSITY])
    selection = resolve_selection([SENTIMENT, INTENSITY], asked, {}, {"sentiment": np.array([900, 100])})
    assert selection.metrics == {"sentiment": "mcc", "intensity": "r2"}
    assert selection.reasons["intensity"] == "asked" and selection.reasons["sentiment"].startswith("default")
    assert Selection.from_json(selection.to_json()) == selection


@pytest.mark.parametrize(("metric", "tasks", "message"), [
    ("f1", [SENTIMENT], "Unknown selection metric 'f1'; choose one of accuracy, macro_f1, mcc, span_f1"),
    ("pearson", [SENTIMENT], "'pearson' does not apply to task 'sentiment' (sequence classification); choose "
                             "one of accuracy, macro_f1, mcc for it."),
    ("span_f1", [SCOPE], "task 'scope' (token classification without IOB tags)"),
    ("mcc", [SENTIMENT, INTENSITY], "'mcc' does not apply to task 'intensity' (regression); choose one of pearson, "
                                    "spearman, r2 for it (metric={'intensity': 'NAME'} picks"),
    ({"topic": "mcc"}, [SENTIMENT], "names unknown task 'topic'; the head's tasks are: sentiment."),
])
def test_a_metric_that_cannot_apply_is_refused_in_one_sentence(metric, tasks, message):
    with pytest.raises(ConfigError) as err:
        requested_metrics(metric, tasks)
    assert message in str(err.value)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")


# ------------------------------------------------------------------------------ through fit
FAST = {"epochs": 4, "patience": 0, "progress": False, "device": "cpu"}


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    with lc.LayerCache.open(tiny_builtin_cache(tiny_models, tmp_path_factory, "selection", 200)) as opened:
        yield opened


@pytest.fixture(scope="module")
def imbalanced(tiny_models, tmp_path_factory):
    """A review task four times as often negative as positive."""
    folder = tmp_path_factory.mktemp("imbalanced")
    path = folder / "reviews.tsv"
    rows = [("the lamp is good today", "pos") if i % 5 == 0 else ("the lamp is not good today", "neg")
            for i in range(60)]
    path.write_text("text\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows))
    result = lc.extract(str(tiny_models["bert"]), str(path), folder / "cache", progress=False)
    with lc.LayerCache.open(result.path) as opened:
        yield opened


def test_the_trainer_keeps_the_epoch_its_metric_prefers(cache):
    head = LayerHead("scalar", tasks=["negation_scope", "intensity"], metric={"negation_scope": "mcc"},
                     **FAST).fit(cache)
    history = head.history_
    assert history.metric == {"negation_scope": "mcc", "intensity": "pearson"}
    scores = [e.val_score for e in history.epochs]
    assert history.best_epoch == best_epoch(scores) and history.best_score == max(scores)
    kept = history.epochs[history.best_epoch - 1].val
    # The weights restored are the kept epoch's: scoring them again gives its numbers.
    assert head.validation_metrics_["negation_scope"]["mcc"] == pytest.approx(kept["negation_scope"])
    assert head.validation_metrics_["intensity"]["pearson"] == pytest.approx(kept["intensity"])
    assert history.best_score == pytest.approx(head.selection_.score(head.validation_metrics_))


def test_imbalanced_classes_select_on_mcc_by_default_and_the_run_says_so(imbalanced, tmp_path):
    result = train_head(imbalanced, "last", out=tmp_path / "run", **FAST)
    assert result.head.selection_.metrics == {"label": "mcc"}
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["selection"]["metric"] == {"label": "mcc"}
    assert metrics["selection"]["reason"]["label"] == "default: imbalanced classes (largest, 'neg', is 80% of train)"
    assert metrics["history"]["metric"] == {"label": "mcc"}
    loaded = LayerHead.load(tmp_path / "run")
    assert loaded.selection_ == result.head.selection_
    assert evaluate_run(tmp_path / "run", imbalanced, "train").primary == {"label": "mcc"}
    asked = LayerHead("last", metric="accuracy", **FAST).fit(imbalanced)
    assert asked.selection_.metrics == {"label": "accuracy"} and asked.selection_.reasons == {"label": "asked"}


def test_a_metric_that_does_not_fit_is_refused_before_training(cache):
    with pytest.raises(ConfigError, match="'r2' does not apply to task 'sentiment'"):
        LayerHead("last", tasks=["sentiment"], metric="r2", **FAST).fit(cache)
