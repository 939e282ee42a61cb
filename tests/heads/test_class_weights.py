"""Class weights: scikit-learn's ``balanced`` rule, explicit weights by name or index, and the loss they give."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import tiny_builtin_cache
from sklearn.utils.class_weight import compute_class_weight

import layercache as lc
from layercache.core.tasks import IGNORE_INDEX, LabelTask
from layercache.errors import ConfigError
from layercache.heads import HeadModel, LayerHead, train_head
from layercache.heads.network.model import HeadOutput
from layercache.heads.training.class_weights import (
    balanced_weights,
    class_weight_values,
    label_counts,
    parse_class_weight,
)
from layercache.store.cache_feed import CacheFeed

SENTIMENT = LabelTask("sentiment", "sequence", ("neg", "pos"))
TOPIC = LabelTask("topic", "sequence", ("food", "music", "art"))
SCOPE = LabelTask("scope", "token", ("O", "CUE", "SCOPE"))
INTENSITY = LabelTask("intensity", "regression")


def test_balanced_is_n_samples_over_n_classes_times_count():
    y = np.array([0, 0, 0, 1, 2, 2])
    counts = label_counts(y, 3)
    assert counts.tolist() == [3, 1, 2]
    np.testing.assert_allclose(balanced_weights(counts), [6 / (3 * 3), 6 / (3 * 1), 6 / (3 * 2)])
    np.testing.assert_allclose(balanced_weights(counts), compute_class_weight("balanced", classes=np.arange(3), y=y))
    # A class train never shows counts neither in n_classes nor in the loss: it weighs 1.
    np.testing.assert_allclose(balanced_weights(np.array([3, 0, 1])), [4 / 6, 1.0, 4 / 2])


def test_token_labels_are_counted_per_word_without_ignored_positions():
    words = [np.array([0, 0, 1]), np.array([0, 2, IGNORE_INDEX])]
    assert label_counts(words, 3).tolist() == [3, 1, 1]


def test_explicit_weights_by_name_or_index_and_the_rest_weigh_one():
    assert class_weight_values(parse_class_weight({"music": 2.5}, [TOPIC]), [TOPIC], {}) == {"topic": [1.0, 2.5, 1.0]}
    assert class_weight_values(parse_class_weight({"2": 4, 0: 0.5}, [TOPIC]), [TOPIC], {}) == {
        "topic": [0.5, 1.0, 4.0]}
    parsed = parse_class_weight({"topic": "balanced", "sentiment": {"pos": 3}}, [TOPIC, SENTIMENT, INTENSITY])
    values = class_weight_values(parsed, [TOPIC, SENTIMENT, INTENSITY], {"topic": np.array([2, 1, 1])})
    assert values == {"topic": [4 / 6, 4 / 3, 4 / 3], "sentiment": [1.0, 3.0]}
    assert parse_class_weight("balanced", [TOPIC, INTENSITY, SCOPE]) == {"topic": "balanced", "scope": "balanced"}
    assert parse_class_weight(None, [TOPIC]) == {}


@pytest.mark.parametrize(("spec", "tasks", "message"), [
    ({"neutral": 2}, [SENTIMENT], "Task 'sentiment' has no class 'neutral'; its classes are neg, pos (or give a "
                                  "class index 0..1)."),
    ({"5": 2}, [SENTIMENT], "has no class '5'"),
    ({"pos": -1}, [SENTIMENT], "The class weight of 'pos' in task 'sentiment' is -1; give a positive number"),
    ({"pos": "high"}, [SENTIMENT], "is 'high'; give a positive number"),
    ("inverse", [SENTIMENT], "Unknown class weight 'inverse'; give 'balanced' or CLASS=WEIGHT pairs"),
    ({"pos": 2}, [SENTIMENT, TOPIC], "this head has sentiment, topic; name the task"),
    ("balanced", [INTENSITY], "this head has none; drop class_weight=...."),
    ({"intensity": "balanced"}, [SENTIMENT, INTENSITY], "'intensity' is a regression task."),
])
def test_bad_class_weights_are_refused_in_one_sentence(spec, tasks, message):
    with pytest.raises(ConfigError) as err:
        parse_class_weight(spec, tasks)
    assert message in str(err.value)


def hand_cross_entropy(logits: np.ndarray, target: np.ndarray, weights: np.ndarray) -> float:
    """``-Σ_i w[y_i] · log softmax(z_i)[y_i] / Σ_i w[y_i]`` over the positions that carry a label."""
    keep = target != IGNORE_INDEX
    z, y = logits[keep].astype(np.float64), target[keep]
    log_p = z - z.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    w = weights[y]
    return float(-(w * log_p[np.arange(len(y)), y]).sum() / w.sum())


def test_weights_change_the_loss_exactly_as_defined():
    torch.manual_seed(0)
    counts = np.array([6, 1, 1])  # the balanced weights of a skewed task: [8/18, 8/3, 8/3]
    weights = balanced_weights(counts)
    model = HeadModel(2, 4, [TOPIC, SCOPE], mixer="last", class_weights={"topic": weights.tolist()})
    model.set_class_weights("scope", [0.25, 2.0, 1.0])
    seq_logits = torch.randn(5, 3)
    seq_target = torch.tensor([0, 0, 1, 2, 0])
    tok_logits = torch.randn(2, 4, 3)
    tok_target = torch.tensor([[0, 1, IGNORE_INDEX, 2], [0, 0, 2, IGNORE_INDEX]])
    out = HeadOutput({"topic": seq_logits, "scope": tok_logits}, torch.zeros(()), {})
    total, parts = model.loss(out, {"topic": seq_target, "scope": tok_target})
    expected_topic = hand_cross_entropy(seq_logits.numpy(), seq_target.numpy(), weights)
    expected_scope = hand_cross_entropy(tok_logits.reshape(-1, 3).numpy(), tok_target.reshape(-1).numpy(),
                                        np.array([0.25, 2.0, 1.0]))
    assert parts["topic"] == pytest.approx(expected_topic, rel=1e-5)
    assert parts["scope"] == pytest.approx(expected_scope, rel=1e-5)
    assert float(total) == pytest.approx(expected_topic + expected_scope, rel=1e-5)
    unweighted = HeadModel(2, 4, [TOPIC], mixer="last")
    plain, _ = unweighted.loss(HeadOutput({"topic": seq_logits}, torch.zeros(()), {}), {"topic": seq_target})
    assert float(plain) == pytest.approx(hand_cross_entropy(seq_logits.numpy(), seq_target.numpy(), np.ones(3)))
    assert float(plain) != pytest.approx(expected_topic)


def test_weights_live_in_the_config_not_the_state_dict():
    model = HeadModel(2, 4, [SENTIMENT], mixer="last", class_weights={"sentiment": [1.0, 4.0]})
    assert model.get_config()["class_weights"] == {"sentiment": [1.0, 4.0]}
    assert not any("class_weight" in key for key in model.state_dict())
    again = HeadModel.from_config(model.get_config())
    assert torch.equal(again.class_weight_tensor("sentiment"), torch.tensor([1.0, 4.0]))
    with pytest.raises(ConfigError, match="needs 2 positive class weights"):
        HeadModel(2, 4, [SENTIMENT], mixer="last", class_weights={"sentiment": [1.0]})


# ------------------------------------------------------------------------------ through fit
FAST = {"epochs": 2, "patience": 0, "progress": False, "device": "cpu"}


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    with lc.LayerCache.open(tiny_builtin_cache(tiny_models, tmp_path_factory, "class-weights", 200)) as opened:
        yield opened


def test_balanced_weights_come_from_the_training_labels_and_are_saved_with_the_run(cache, tmp_path):
    tasks = ["negation_scope", "topic", "intensity"]
    result = train_head(cache, "scalar", out=tmp_path / "run", tasks=tasks, class_weight="balanced", **FAST)
    train = CacheFeed(cache, "train", tasks=tasks)
    n_classes = {t.name: t.num_classes for t in cache.tasks}
    expected = {name: balanced_weights(label_counts(train.gold(name), n_classes[name])) for name in tasks[:2]}
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["params"]["class_weight"] == "balanced"
    assert set(config["model"]["class_weights"]) == set(expected)  # the regression task has none
    for name, weights in expected.items():
        np.testing.assert_allclose(config["model"]["class_weights"][name], weights)
        np.testing.assert_allclose(result.head.model_.class_weights[name], weights)
    loaded = LayerHead.load(tmp_path / "run")
    assert loaded.model_.class_weights == result.head.model_.class_weights
    assert torch.equal(loaded.model_.class_weight_tensor("topic"), result.head.model_.class_weight_tensor("topic"))


def test_unknown_classes_are_refused_before_training(cache):
    with pytest.raises(ConfigError, match="Task 'sentiment' has no class 'pos'; its classes are negative, positive"):
        LayerHead("last", tasks=["sentiment"], class_weight={"pos": 2}, **FAST).fit(cache)
