"""The convex fit of linear heads on fixed features, checked against scikit-learn on the same vectors.

The cache is the built-in task set through the tiny BERT with its pooled means replaced by planted
ones (the states an extraction would write are not the point here): ``layer_1`` holds a weak,
noisy-linear signal for the imbalanced (70/30) ``sentiment``, class means for the six ``topic``
classes and a linear ``intensity`` target; the other states are noise. A ``layer:1`` head on it is
a logistic (ridge) regression on ``layer_1``'s pooled vectors, so it must match scikit-learn's
``StandardScaler`` + ``LogisticRegression`` (``Ridge``) with ``C`` chosen the same way: on the
cache's validation split, by the run's selection metric, from the same grid.

The token task ``negation_scope`` keeps the states the extraction wrote: a ``layer:1`` token head
is a logistic regression on ``layer_1``'s state of each word's first sub-token, scored per word.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from planted_support import plant_linear_signals
from scipy.stats import pearsonr
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import layercache as lc
from layercache.errors import ConfigError
from layercache.heads import HeadModel, LayerHead, train_head
from layercache.heads.training.convex import DEFAULT_C_GRID
from layercache.heads.training.fitting import convex_obstacle, resolve_solver

SIGNAL = 1  # layer_1
QUICK = {"progress": False, "device": "cpu"}
PLANTED = ("convex", 400)  # the planted cache of the root conftest: its name and examples per split
plant = plant_linear_signals  # and what it plants (tests/cli/test_heads.py plants the same)


def vectors(cache, split: str) -> np.ndarray:
    return cache.pooled(split, "mean", [SIGNAL])[:, 0].astype(np.float64)  # (n, D)


def sklearn_choice(cache, task: str, score, grid=DEFAULT_C_GRID, **kwargs):
    """scikit-learn's model for ``task``, its C chosen on the validation split by ``score``, from ``grid``."""
    X, y = vectors(cache, "train"), np.asarray(cache.labels("train", task))
    X_val, y_val = vectors(cache, "validation"), np.asarray(cache.labels("validation", task))
    best, best_score = None, -np.inf
    for C in sorted(grid):
        if task == "intensity":
            model = make_pipeline(StandardScaler(), Ridge(alpha=1 / C)).fit(X, y)
        else:
            model = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000, tol=1e-8, **kwargs))
            model.fit(X, y)
        value = score(y_val, model.predict(X_val))
        if value > best_score:  # the first best: the smallest C
            best, best_score = (C, model), value
    return best


def head_probabilities(head, cache, task: str, split: str = "test") -> np.ndarray:
    return head.predict(cache, split).predictions[task].probabilities


def test_layer_head_matches_sklearn_logistic_regression_with_c_chosen_the_same_way(planted):
    head = LayerHead(f"layer:{SIGNAL}", tasks=["sentiment", "topic"], **QUICK).fit(planted)
    assert head.fit_["solver"] == "lbfgs" and head.history_.solver == "lbfgs"
    assert head.selection_.metrics == {"sentiment": "mcc", "topic": "accuracy"}
    test = head.score(planted, "test")
    X_test = vectors(planted, "test")
    for task, metric in (("sentiment", matthews_corrcoef), ("topic", accuracy_score)):
        C, sk = sklearn_choice(planted, task, metric)
        y_test = np.asarray(planted.labels("test", task))
        print(f"{task}: C head {head.fit_['C'][task]:g} sklearn {C:g}; test accuracy head "
              f"{test[task]['accuracy']:.4f} sklearn {sk.score(X_test, y_test):.4f}; mcc head {test[task]['mcc']:.4f} "
              f"sklearn {matthews_corrcoef(y_test, sk.predict(X_test)):.4f}")
        assert head.fit_["C"][task] == C, task
        assert abs(test[task]["accuracy"] - sk.score(X_test, y_test)) <= 0.01, task
        np.testing.assert_allclose(head_probabilities(head, planted, task), sk.predict_proba(X_test), atol=5e-3)
    assert test["sentiment"]["mcc"] > 0.05  # the weak signal is found, where minibatches may miss it


@pytest.mark.parametrize("normalize", ["none", "standardize"])
def test_the_fit_does_not_depend_on_the_input_normalisation(planted, normalize):
    head = LayerHead(f"layer:{SIGNAL}", tasks=["topic"], normalize=normalize, C_grid=[0.1], **QUICK).fit(planted)
    sk = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=5000, tol=1e-8))
    sk.fit(vectors(planted, "train"), np.asarray(planted.labels("train", "topic")))
    np.testing.assert_allclose(head_probabilities(head, planted, "topic"), sk.predict_proba(vectors(planted, "test")),
                               atol=5e-3)


def test_regression_head_matches_sklearn_ridge(planted):
    head = LayerHead(f"layer:{SIGNAL}", tasks=["intensity"], **QUICK).fit(planted)
    assert head.history_.fit["method"] == {"intensity": "ridge (closed form)"}
    C, sk = sklearn_choice(planted, "intensity", lambda a, b: pearsonr(a, b)[0])
    assert head.fit_["C"]["intensity"] == C
    ours = head.predict(planted, "test").predictions["intensity"].labels
    theirs = sk.predict(vectors(planted, "test"))
    print(f"intensity: C {C:g}; test pearson head {pearsonr(ours, planted.labels('test', 'intensity'))[0]:.4f} "
          f"sklearn {pearsonr(theirs, planted.labels('test', 'intensity'))[0]:.4f}")
    np.testing.assert_allclose(ours, theirs, atol=1e-3 * np.std(theirs))


@pytest.mark.parametrize("class_weight", ["balanced", {"positive": 3.0}])
def test_class_weights_change_the_fit_as_sklearn_class_weight_does(planted, class_weight):
    names = planted.manifest.task("sentiment").label_names
    y = np.asarray(planted.labels("train", "sentiment"))
    if class_weight == "balanced":
        sk_weight = "balanced"
    else:
        sk_weight = {0: 1.0, 1: 1.0}
        sk_weight[names.index("positive")] = 3.0
    C = 1.0
    head = LayerHead(f"layer:{SIGNAL}", tasks=["sentiment"], class_weight=class_weight, C_grid=[C], **QUICK)
    head.fit(planted)
    plain = LayerHead(f"layer:{SIGNAL}", tasks=["sentiment"], C_grid=[C], **QUICK).fit(planted)
    sk = make_pipeline(StandardScaler(), LogisticRegression(C=C, class_weight=sk_weight, max_iter=5000, tol=1e-8))
    sk.fit(vectors(planted, "train"), y)
    ours, theirs = head_probabilities(head, planted, "sentiment"), sk.predict_proba(vectors(planted, "test"))
    unweighted = head_probabilities(plain, planted, "sentiment")
    print(f"class_weight={class_weight}: max |p head - p sklearn| {np.abs(ours - theirs).max():.2e}; mean p(positive) "
          f"weighted {ours[:, 1].mean():.3f} unweighted {unweighted[:, 1].mean():.3f}")
    np.testing.assert_allclose(ours, theirs, atol=5e-3)
    # and the weights moved the probabilities toward the rarer, up-weighted class
    assert ours[:, 1].mean() > unweighted[:, 1].mean() + 0.05


def test_the_saved_run_records_the_fit_and_loads_predicting_identically(planted, tmp_path):
    result = train_head(planted, f"layer:{SIGNAL}", out=tmp_path / "run", tasks=["sentiment", "intensity"], **QUICK)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert config["params"]["solver"] == "auto"
    assert config["fit"]["solver"] == metrics["fit"]["solver"] == "lbfgs"
    assert set(config["fit"]["C"]) == {"sentiment", "intensity"} and config["fit"]["C_grid"] == list(DEFAULT_C_GRID)
    history = metrics["history"]
    assert history["solver"] == "lbfgs" and len(history["epochs"]) == 1 and history["best_epoch"] == 1
    assert len(history["fit"]["grid_scores"]["sentiment"]) == len(DEFAULT_C_GRID)
    summary = result.head.history_.summary(result.head.selection_.describe())
    assert summary.startswith("fitted by L-BFGS and ridge (closed form), C ") and "chosen on validation by" in summary
    # The kept model scores on validation what the grid said it would.
    chosen = DEFAULT_C_GRID.index(config["fit"]["C"]["sentiment"])
    grid_scores = history["fit"]["grid_scores"]["sentiment"]
    assert metrics["validation"]["sentiment"]["mcc"] == pytest.approx(grid_scores[chosen])
    loaded = LayerHead.load(tmp_path / "run")
    assert loaded.fit_ == config["fit"]
    before, after = result.head.predict(planted, "test"), loaded.predict(planted, "test")
    np.testing.assert_array_equal(before.predictions["sentiment"].probabilities,
                                  after.predictions["sentiment"].probabilities)
    np.testing.assert_array_equal(before.predictions["intensity"].labels, after.predictions["intensity"].labels)
    assert loaded.layer_weights() == {"shared": [0.0, 1.0, 0.0]}


def test_auto_picks_the_solver_by_the_model_and_adamw_stays_available(planted):
    tasks = [planted.manifest.task("sentiment")]
    model = lambda mixer, **options: HeadModel(3, 32, tasks, mixer=mixer, **options)  # noqa: E731
    assert resolve_solver("auto", model("last")) == "lbfgs"
    assert resolve_solver("auto", model("layer:0", head_options={"pooling": "first"})) == "lbfgs"
    assert resolve_solver("auto", model("scalar")) == "adamw"  # mix weights x a linear head: not convex
    assert resolve_solver("auto", model("last", head_options={"hidden": 8})) == "adamw"
    assert "learns its pooling" in convex_obstacle(model("last", head_options={"pooling": "attention"}))
    head = LayerHead(f"layer:{SIGNAL}", tasks=["sentiment"], solver="adamw", epochs=2, patience=0, **QUICK)
    head.fit(planted)
    assert head.fit_ == {"solver": "adamw"} and len(head.history_.epochs) == 2
    assert head.history_.summary("mcc") == "best epoch {} of 2 by mcc".format(head.history_.best_epoch)


@pytest.mark.parametrize(("mixer", "options", "fragment"), [
    ("adaptive", {}, "the mixer 'adaptive' learns layer weights, so the problem is not convex"),
    ("scalar", {}, "the mixer 'scalar' learns layer weights"),
    ("last", {"head_options": {"hidden": 16}}, "has a hidden layer (hidden=16)"),
])
def test_lbfgs_on_a_head_that_is_not_convex_is_refused_in_one_sentence(planted, mixer, options, fragment):
    with pytest.raises(ConfigError) as err:
        LayerHead(mixer, tasks=["sentiment"], solver="lbfgs", **options, **QUICK).fit(planted)
    message = str(err.value)
    assert fragment in message and message.endswith("use solver='adamw' (or auto, which picks it).")
    assert message.count(". ") == 0


@pytest.mark.parametrize(("params", "fragment"), [
    ({"solver": "newton"}, "Unknown solver 'newton'; choose one of auto, lbfgs, adamw."),
    ({"C_grid": [1.0, -1.0]}, "C_grid must be a non-empty list of positive numbers"),
])
def test_bad_solver_settings_are_refused(planted, params, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        LayerHead("last", tasks=["sentiment"], **params, **QUICK).fit(planted)


def test_each_task_is_its_own_problem_with_shared_or_separate_mixers(planted):
    shared = LayerHead(f"layer:{SIGNAL}", tasks=["topic", "sentiment"], **QUICK).fit(planted)
    alone = LayerHead(f"layer:{SIGNAL}", tasks=["topic"], **QUICK).fit(planted)
    separate = LayerHead(f"layer:{SIGNAL}", tasks=["topic", "sentiment"], share_mixer=False, **QUICK).fit(planted)
    assert shared.fit_["C"]["topic"] == alone.fit_["C"]["topic"] == separate.fit_["C"]["topic"]
    assert set(separate.layer_weights()) == {"topic", "sentiment"}
    expected = head_probabilities(alone, planted, "topic")
    for head in (shared, separate):
        np.testing.assert_allclose(head_probabilities(head, planted, "topic"), expected, atol=1e-5)


def word_vectors(cache, split: str, task: str = "negation_scope"):
    """Each word's first sub-token state of ``layer_1`` ``(n_seen, D)``, its label, and the words' layout.

    Built from the cache's own arrays, not through the head: which (row, word) each vector is, so
    per-word predictions can be laid out as evaluation lays them out (a word never seen gets ``O``).
    """
    gold = cache.labels(split, task)
    rows = np.arange(len(gold))
    states = cache.tokens(split, rows, layers=[SIGNAL])  # (t_i, 1, D) each
    word_ids = cache.token_arrays(split, "word_ids", rows)
    X, y, where = [], [], []
    for row, (h, w) in enumerate(zip(states, word_ids)):
        w = np.asarray(w, np.int64)
        previous = np.concatenate([[-2], w[:-1]])
        first = np.nonzero((w >= 0) & (w != previous) & (w < len(gold[row])))[0]
        X.append(h[first, 0].astype(np.float64))
        y.append(np.asarray(gold[row])[w[first]])
        where.extend((row, int(word)) for word in w[first])
    return np.concatenate(X), np.concatenate(y), where, gold


def per_word(predicted, where, gold, fill: int = 0):
    """Per-word predictions ``[(n_words_i,)]`` from one prediction per seen word (``fill``: ``O``)."""
    out = [np.full(len(g), fill, np.int64) for g in gold]
    for (row, word), label in zip(where, predicted):
        out[row][word] = label
    return out


def test_token_head_is_fitted_by_lbfgs_and_matches_sklearn_on_the_first_subtokens(planted):
    head = LayerHead(f"layer:{SIGNAL}", tasks=["negation_scope"], **QUICK).fit(planted)
    assert head.fit_["solver"] == "lbfgs" and head.history_.fit["method"] == {"negation_scope": "L-BFGS"}
    assert head.selection_.metrics == {"negation_scope": "macro_f1"}  # not IOB tags: macro-F1 per word
    X, y, _, _ = word_vectors(planted, "train")
    assert head.history_.fit["n_train"] == {"negation_scope": len(y)}  # one example per word, not per sentence
    # The grid was scored per word as evaluation scores: the kept C's entry is the validation metric.
    chosen = DEFAULT_C_GRID.index(head.fit_["C"]["negation_scope"])
    assert head.history_.fit["grid_scores"]["negation_scope"][chosen] == pytest.approx(
        head.validation_metrics_["negation_scope"]["macro_f1"])
    C = head.fit_["C"]["negation_scope"]
    sk = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000, tol=1e-8)).fit(X, y)
    X_test, _, where, gold = word_vectors(planted, "test")
    theirs = per_word(sk.predict(X_test), where, gold)
    ours = head.predict(planted, "test").predictions["negation_scope"].labels
    flat_gold, flat_ours, flat_theirs = (np.concatenate(a) for a in (gold, ours, theirs))
    agree = np.mean(flat_ours == flat_theirs)
    scores = {name: (accuracy_score(flat_gold, p), f1_score(flat_gold, p, average="macro"))
              for name, p in (("head", flat_ours), ("sklearn", flat_theirs))}
    print(f"negation_scope: C {C:g}; {len(flat_gold)} test words, {agree:.2%} predicted alike; accuracy / macro-F1 "
          f"head {scores['head'][0]:.4f} / {scores['head'][1]:.4f}, sklearn {scores['sklearn'][0]:.4f} / "
          f"{scores['sklearn'][1]:.4f}")
    assert agree >= 0.99
    assert abs(scores["head"][0] - scores["sklearn"][0]) <= 0.01
    assert head.score(planted, "test")["negation_scope"]["macro_f1"] == pytest.approx(scores["head"][1])


def test_words_cut_off_at_the_maximum_length_are_scored_as_evaluation_scores_them(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCACHE_HOME", str(tmp_path / "home"))
    lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", limit=60, max_length=8, progress=False)
    with lc.LayerCache.open(tmp_path / "cache") as cache:
        X, _, _, gold = word_vectors(cache, "validation")
        assert len(X) < sum(len(g) for g in gold)  # some words were never seen
        head = LayerHead(f"layer:{SIGNAL}", tasks=["negation_scope"], metric="accuracy", **QUICK).fit(cache)
    chosen = list(head.fit_["C_grid"]).index(head.fit_["C"]["negation_scope"])
    # The grid's validation words include the unseen ones, predicted O as evaluation predicts them.
    assert head.history_.fit["grid_scores"]["negation_scope"][chosen] == pytest.approx(
        head.validation_metrics_["negation_scope"]["accuracy"])
    assert head.validation_metrics_["negation_scope"]["n_words"] == sum(len(g) for g in gold)


def test_a_token_head_with_encoder_layers_is_not_convex(planted):
    tasks = [planted.manifest.task("negation_scope")]
    options = {"encoder_layers": 1, "attention_heads": 2, "ff_dim": 16}
    model = HeadModel(3, 32, tasks, mixer=f"layer:{SIGNAL}", head_options=options)
    assert resolve_solver("auto", model) == "adamw"
    with pytest.raises(ConfigError) as err:
        LayerHead(f"layer:{SIGNAL}", tasks=["negation_scope"], solver="lbfgs", head_options=options,
                  **QUICK).fit(planted)
    message = str(err.value)
    assert ("the head of task 'negation_scope' has transformer encoder layers (encoder_layers=1), so the problem "
            "is not convex") in message
    assert message.endswith("use solver='adamw' (or auto, which picks it).") and message.count(". ") == 0
    # ff_dim and attention_heads build nothing without encoder layers: still a linear head
    plain = HeadModel(3, 32, tasks, mixer=f"layer:{SIGNAL}", head_options={"ff_dim": 16, "attention_heads": 2})
    assert convex_obstacle(plain) is None


def test_a_convex_token_head_saves_and_loads_predicting_identically(planted, tmp_path):
    result = train_head(planted, f"layer:{SIGNAL}", out=tmp_path / "run", tasks=["negation_scope", "sentiment"],
                        C_grid=[0.1, 1.0], **QUICK)
    assert result.head.fit_["solver"] == "lbfgs" and set(result.head.fit_["C"]) == {"negation_scope", "sentiment"}
    loaded = LayerHead.load(tmp_path / "run")
    assert loaded.fit_ == result.head.fit_
    before, after = result.head.predict(planted, "test"), loaded.predict(planted, "test")
    for b, a in zip(before.predictions["negation_scope"].labels, after.predictions["negation_scope"].labels):
        np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(before.predictions["sentiment"].probabilities,
                                  after.predictions["sentiment"].probabilities)
    assert loaded.score(planted, "test") == result.head.score(planted, "test")
