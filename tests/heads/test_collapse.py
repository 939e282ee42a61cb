"""The collapse warning: it fires on a head that predicts (nearly) one class, never on a good head."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_builtin_cache

import layercache as lc
from layercache.core.option_names import speaking_to_command_line
from layercache.core.tasks import LabelTask
from layercache.heads import LayerHead, train_head
from layercache.heads.training.collapse import collapse_warning, find_collapse

SENTIMENT = LabelTask("sentiment", "sequence", ("neg", "pos"))
NER = LabelTask("ner", "token", ("O", "B-PER", "I-PER"))
FAST = {"epochs": 4, "patience": 0, "progress": False, "device": "cpu"}


def skewed(n: int, share: float, rng) -> np.ndarray:
    """``n`` labels of which about ``share`` are class 0 and the rest class 1, shuffled."""
    return rng.permutation((np.arange(n) >= round(share * n)).astype(np.int64))


def test_a_majority_class_head_is_found_and_a_good_one_is_not():
    rng = np.random.default_rng(0)
    gold = skewed(1000, 0.8, rng)
    majority = np.zeros(1000, dtype=np.int64)
    found = find_collapse(gold, majority)
    assert found is not None and found.class_id == 0
    assert found.predicted_share == 1.0 and found.true_share == pytest.approx(0.8)
    nearly = majority.copy()
    nearly[np.nonzero(gold == 1)[0][:20]] = 1  # 2% minority predictions for a 20% minority
    assert find_collapse(gold, nearly) is not None
    good = gold.copy()
    good[rng.choice(1000, 100, replace=False)] ^= 1  # 90% accurate, both classes predicted
    assert find_collapse(gold, good) is None
    assert find_collapse(gold, 1 - majority) is not None  # collapsed onto the minority class


def test_a_good_tagger_on_words_that_are_nearly_all_o_is_not_a_collapse():
    rng = np.random.default_rng(1)
    gold = [rng.choice(3, size=30, p=[0.97, 0.02, 0.01]) for _ in range(100)]
    good = [g.copy() for g in gold]
    for g in good[:10]:
        g[0] = 0  # a few entity words missed: ~97% of the predictions are O, as in the truth
    assert find_collapse(gold, good) is None
    all_o = [np.zeros_like(g) for g in gold]
    assert find_collapse(gold, all_o) is not None
    assert find_collapse([np.zeros(5, dtype=np.int64)], [np.zeros(5, dtype=np.int64)]) is None  # truth is one class


def test_the_warning_names_the_task_the_class_and_what_to_try():
    gold, pred = np.array([0] * 80 + [1] * 20), np.zeros(100, dtype=np.int64)
    text = collapse_warning(SENTIMENT, gold, pred, metric="accuracy")
    assert text == ("Task 'sentiment' has collapsed onto one class: 100.0% of the validation predictions are 'neg', "
                    "whose true share is 80.0%; try class_weight='balanced', metric='mcc', or a lower lr=... / more "
                    "epochs=....")
    with speaking_to_command_line():  # train-head's warning names its flags
        assert collapse_warning(SENTIMENT, gold, pred, metric="accuracy").endswith(
            "try --class-weight balanced, --metric mcc, or a lower --lr / more --epochs.")
    # What the run already did is not suggested again.
    text = collapse_warning(SENTIMENT, gold, pred, metric="mcc", balanced=True)
    assert "class_weight" not in text and "metric=" not in text
    assert text.endswith("try a lower lr=... / more epochs=....")
    assert "metric='span_f1'" in collapse_warning(NER, [gold], [pred], metric="accuracy")
    assert collapse_warning(SENTIMENT, gold, gold, metric="accuracy") is None


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    with lc.LayerCache.open(tiny_builtin_cache(tiny_models, tmp_path_factory, "collapse", 400)) as opened:
        yield opened


def test_fit_warns_on_a_planted_majority_class_head_and_not_on_a_good_one(cache, tmp_path, caplog):
    # Weighing O a thousand times over the other classes plants a head that tags every word O.
    result = train_head(cache, "scalar", out=tmp_path / "planted", tasks=["negation_scope"],
                        class_weight={"O": 1000}, **FAST)
    warnings = result.metrics["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("Task 'negation_scope' has collapsed onto one class")
    assert "'O'" in warnings[0] and "class_weight='balanced'" in warnings[0]
    assert warnings[0] in caplog.text
    assert json.loads((tmp_path / "planted" / "metrics.json").read_text())["warnings"] == warnings
    # A head trained as usual is no collapse (it tags O somewhat more often than the truth does), and
    # the first thing the warning suggests fixes the planted one.
    for class_weight in (None, "balanced"):
        good = LayerHead("scalar", tasks=["negation_scope"], class_weight=class_weight, **FAST).fit(cache)
        assert good.validation_metrics_["negation_scope"]["macro_f1"] > 0.4
        assert good.warnings_ == []
