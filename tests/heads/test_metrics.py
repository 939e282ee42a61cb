"""Metrics: hand-worked values, and entity-level span F1 on the IOB cases conlleval is picky about."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layercache.heads.scoring.metrics import (
    accuracy,
    classification_report,
    entity_spans,
    macro_f1,
    matthews_corrcoef,
    pearson,
    r2,
    span_f1,
    spearman,
)


# ----------------------------------------------------------------------------- classification
def test_accuracy_and_macro_f1_by_hand():
    y = [0, 0, 1, 1, 2, 2]
    p = [0, 1, 1, 1, 2, 0]
    assert accuracy(y, p) == pytest.approx(4 / 6)
    # class 0: P 1/2 R 1/2 F 1/2; class 1: P 2/3 R 1 F 0.8; class 2: P 1 R 1/2 F 2/3
    assert macro_f1(y, p) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)


def test_matthews_binary_and_multiclass():
    y = [1, 1, 1, 0, 0, 0, 0, 1]
    p = [1, 1, 0, 0, 0, 1, 0, 1]
    tp, tn, fp, fn = 3, 3, 1, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert matthews_corrcoef(y, p) == pytest.approx(expected)
    assert matthews_corrcoef([0, 1, 2, 2], [0, 1, 2, 2]) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 2, 0], [1, 1, 1, 1]) == 0.0  # constant prediction


def test_r2_by_hand():
    y = [1.0, 2.0, 3.0, 4.0]
    p = [1.5, 2.0, 2.5, 4.0]
    # MSE = (0.25 + 0 + 0.25 + 0) / 4 = 0.125; Var(y) = 1.25
    assert r2(y, p) == pytest.approx(1 - 0.125 / 1.25)
    assert r2(y, y) == 1.0
    assert r2(y, [2.5] * 4) == pytest.approx(0.0)  # the mean of the targets
    assert math.isnan(r2([2.0, 2.0], [1.0, 3.0]))  # constant targets: undefined

def test_length_mismatch_and_empty_are_refused():
    with pytest.raises(ValueError, match="3 and 2"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])


def test_classification_report():
    y = np.array([0, 0, 1, 1, 2, 2])
    p = np.array([0, 1, 1, 1, 2, 0])
    report = classification_report(y, p, ["neg", "pos", "mixed", "unused"])
    assert list(report["per_class"]) == ["neg", "pos", "mixed", "unused"]
    assert report["per_class"]["pos"] == pytest.approx(
        {"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "support": 2}
    )
    assert report["per_class"]["unused"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert report["accuracy"] == pytest.approx(4 / 6)
    assert report["support"] == 6
    assert report["macro"]["f1"] == pytest.approx((0.5 + 0.8 + 2 / 3 + 0) / 4)
    assert report["weighted"]["f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    with pytest.raises(ValueError, match="class id 4"):
        classification_report([0, 4], [0, 1], ["a", "b"])


# --------------------------------------------------------------------------------- regression
def test_pearson_and_spearman():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert pearson(x, -x) == pytest.approx(-1.0)
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert spearman(x, np.exp(x)) == pytest.approx(1.0)  # monotone, not linear
    assert pearson(x, np.exp(x)) < 0.95
    # ties take the average rank: ranks (1.5, 1.5, 3) vs (1, 2, 3)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1, 2, 3], [4, 4, 4]))


# ------------------------------------------------------------------------------ entity spans
@pytest.mark.parametrize(
    "tags, spans",
    [
        (["B-PER", "I-PER", "O", "B-LOC"], {("PER", 0, 2), ("LOC", 3, 4)}),  # IOB2, span at the end
        (["O", "I-PER", "I-PER", "O"], {("PER", 1, 3)}),  # IOB1: I- after O starts an entity
        (["I-PER"], {("PER", 0, 1)}),  # I- at the very start
        (["I-PER", "I-LOC"], {("PER", 0, 1), ("LOC", 1, 2)}),  # I- after another type
        (["B-PER", "I-LOC", "I-LOC"], {("PER", 0, 1), ("LOC", 1, 3)}),  # type change inside a span
        (["I-PER", "B-PER", "I-PER"], {("PER", 0, 1), ("PER", 1, 3)}),  # IOB1: B- splits same type
        (["B-PER", "B-PER"], {("PER", 0, 1), ("PER", 1, 2)}),
        (["O", "O"], set()),
        ([], set()),
        (["B-MISC", "I-MISC", "I-MISC"], {("MISC", 0, 3)}),  # runs to the end of the sentence
        (["S-PER", "B-LOC", "E-LOC", "I-LOC"], {("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4)}),  # IOBES
    ],
)
def test_entity_spans(tags, spans):
    assert entity_spans(tags) == spans


@pytest.mark.parametrize("tag", ["PER", "X-PER", "B-", "B_PER", ""])
def test_malformed_tags_are_refused(tag):
    with pytest.raises(ValueError, match="tag"):
        entity_spans(["O", tag])


def test_span_f1_by_hand():
    true = [
        ["B-PER", "I-PER", "O", "B-LOC"],
        ["B-ORG", "I-ORG", "I-ORG", "O"],
        ["O", "B-LOC", "O"],
    ]
    pred = [
        ["B-PER", "I-PER", "O", "B-LOC"],  # both right
        ["B-ORG", "I-ORG", "O", "O"],  # boundary wrong: one false positive, one miss
        ["O", "I-LOC", "B-PER"],  # I-LOC after O is LOC(1, 2): right; PER is a false positive
    ]
    result = span_f1(true, pred)
    assert (result["n_true"], result["n_pred"], result["n_correct"]) == (4, 5, 3)
    assert result["precision"] == pytest.approx(3 / 5)
    assert result["recall"] == pytest.approx(3 / 4)
    assert result["f1"] == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    loc, org = result["per_type"]["LOC"], result["per_type"]["ORG"]
    assert loc == pytest.approx({"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2})
    assert org == pytest.approx({"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1})
    assert result["per_type"]["PER"] == pytest.approx(
        {"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1}
    )


def test_span_f1_spans_do_not_match_across_sentences():
    result = span_f1([["B-PER"], ["O"]], [["O"], ["B-PER"]])
    assert result["n_correct"] == 0
    assert result["f1"] == 0.0


def test_span_f1_iob1_and_iob2_of_the_same_entities_agree():
    iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]]
    iob2 = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]]
    assert span_f1(iob1, iob2)["f1"] == 1.0


def test_span_f1_empty_predictions_score_zero_not_nan():
    result = span_f1([["B-PER", "O"]], [["O", "O"]])
    assert (result["precision"], result["recall"], result["f1"]) == (0.0, 0.0, 0.0)
    assert span_f1([["O"]], [["O"]])["f1"] == 0.0


def test_span_f1_length_mismatch():
    with pytest.raises(ValueError, match="sentence 0"):
        span_f1([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="2 true and 1 predicted"):
        span_f1([["O"], ["O"]], [["O"]])
