"""``sweep``: candidates from the registry, the validation winner kept as a run, the budget honoured.

The cache is the built-in task set through the tiny BERT with its pooled means replaced by planted
ones: ``layer_1`` holds the six ``topic`` classes' means, the other states are noise. The candidates
that read pooled vectors (``last``, ``layer:<i>``, ``scalar``) then have a known best single state.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import time

import numpy as np
import pytest
from planted_support import plant_topic_means
from rich.console import Console

import layercache as lc
from layercache.cli.sweep import render_leaderboard
from layercache.core.units import human_seconds, parse_duration
from layercache.errors import ConfigError
from layercache.heads import LayerHead, SweepResult, candidate_grid, sweep
from layercache.heads.ensembles.model import EnsembleModel
from layercache.heads.mixers import MIXERS
from layercache.heads.network.model import HeadModel
from layercache.heads.scoring.selection import Selection
from layercache.heads.sweeps.sweep import LR_FACTORS, Candidate
from layercache.heads.training.trainer import TrainConfig, train_model
from layercache.store.feed_pool import FeedPool

sweep_module = importlib.import_module("layercache.heads.sweeps.sweep")  # the module, not the function
SIGNAL = 1  # layer_1
POOLED = ["last", "layer", "scalar"]  # the mixers that read the planted pooled vectors
QUICK = {"epochs": 2, "patience": 0, "device": "cpu", "progress": False}
PLANTED = ("sweep", 300)  # the planted cache of the root conftest: its name and examples per split
plant = plant_topic_means  # and what it plants (tests/cli/test_sweep.py plants the same)


@pytest.fixture(scope="module")
def swept(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("swept") / "sweep"
    return sweep(planted, out=out, tasks="topic", mixers=POOLED, seeds=2, budget=None, ensemble=2, **QUICK)


# --- budgets --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [("300", 300), ("300s", 300), ("5m", 300), ("1h", 3600),
                                               ("1h30m", 5400), ("2m 30s", 150), ("0.5", 0.5), (" 5 min ", 300),
                                               (90, 90), (1.5, 1.5)])
def test_budgets_are_parsed_by_one_helper(text, seconds):
    assert parse_duration(text, "budget") == seconds


@pytest.mark.parametrize("text", ["5 parsecs", "-3", "0", "", "m", "5m5", "1e3", "inf", "nan", True])
def test_bad_budgets_are_refused_in_one_sentence(text):
    with pytest.raises(ConfigError, match=r"^The budget .* 300s, 5m, 1h30m or plain seconds \(300\)\.$"):
        parse_duration(text, "budget")


def test_durations_read_as_people_write_them():
    assert [human_seconds(s) for s in (0.042, 4.2, 42, 75, 300, 5430)] == [
        "0.042 s", "4.2 s", "42 s", "1 min 15 s", "5 min", "1 h 30 min"]


# --- the candidates -----------------------------------------------------------------------------------
def test_the_grid_reads_the_registry_and_varies_one_setting_at_a_time():
    grid = candidate_grid(4)
    defaults = [c for c in grid if c.base is None]
    assert {c.family for c in defaults} == set(MIXERS)  # every registered mixer, nothing hard-coded
    assert [c.mixer for c in defaults[:4]] == ["last", "layer:0", "layer:1", "layer:2"]  # every state once
    for name, cls in MIXERS.items():
        variants = [c for c in grid if c.base == name]
        if cls.sweep_specs(4) != [name]:
            assert not variants  # tried state by state: no grid on top
            continue
        assert [c.lr_factor for c in variants if c.lr_factor is not None] == list(LR_FACTORS)
        assert [c.mixer_options for c in variants if c.lr_factor is None] == list(cls.sweep_options)
        for c in variants:
            assert c.mixer == name and bool(c.mixer_options) != (c.lr_factor is not None)
            MIXERS[name](4, 8, **c.mixer_options)  # every option a mixer declares, it takes
    assert candidate_grid(4, ["scalar", "layer"], grid=False) == [  # registry order: the cheap ones first
        Candidate("layer:0"), Candidate("layer:1"), Candidate("layer:2"), Candidate("scalar")]
    assert Candidate("adaptive", {"k": 32}).name == "adaptive k=32"
    assert Candidate("scalar", lr_factor=3.0).name == "scalar lr×3"
    with pytest.raises(ConfigError, match="Unknown mixer 'mean' to sweep; choose among: last, layer"):
        candidate_grid(4, ["mean"])


# --- the winner and its run -------------------------------------------------------------------------
def test_the_sweep_keeps_the_validation_winner_as_a_loadable_run(swept, planted):
    board = swept.leaderboard
    assert swept.ranking == "averaged"  # the default pick keeps the seeds averaged, so it ranks by them
    scores = [c.rank_score("averaged") for c in board]
    assert scores == sorted(scores, reverse=True)
    for c in board:
        assert (c.averaged is None) == (len(c.seeds) == 1)
        assert c.rank_score("averaged") == (c.validation[0] if c.averaged is None else c.averaged["validation"])
    singles = [c.candidate for c in board if c.mixer.startswith("layer:") or c.mixer == "last"]
    assert singles[0] == f"layer:{SIGNAL}"  # the planted state wins among the single states
    for c in board:
        if c.solver == "lbfgs":  # the convex fit is deterministic: one run
            assert c.deterministic and c.seeds == [0] and c.validation_sd is None and c.lr is None
        else:
            assert not c.deterministic and c.seeds == [0, 1] and c.validation_sd is not None and c.lr > 0
        assert len(c.test) == len(c.seeds)
    assert {c.candidate for c in board} == {"last", "layer:0", "layer:1", "scalar",  # 3 states: last is the third
                                            *(f"scalar lr×{f:g}" for f in LR_FACTORS)}
    assert any("no learning rate" in s["reason"] for s in swept.skipped)  # last's lr grid: convex, so none

    assert_pick_is_the_run(swept, planted)
    assert swept.feeds["built"] < swept.feeds["served"]  # one read of the cache, shared by every fit


def assert_pick_is_the_run(result, cache, kind: str | None = None) -> LayerHead:
    """``best/`` is the winner's pick (its seeds averaged, or its best run), and scores what sweep.json says."""
    winner, pick = result.winner, result.pick
    assert result.best == result.out / "best" and pick["candidate"] == winner.candidate
    if kind is None:
        kind = "best-seed" if len(winner.seeds) == 1 else "seeds"
    assert pick["kind"] == kind
    metrics = json.loads((result.best / "metrics.json").read_text())
    selection = Selection.from_json(metrics["selection"])
    kept = selection.score(metrics["validation"])
    assert kept == pytest.approx(pick["validation"])
    head = LayerHead.load(result.best)
    if kind == "seeds":
        assert pick["seeds"] == winner.seeds and head.fit_["seeds"] == winner.seeds
        assert isinstance(head.model_, EnsembleModel)
    else:
        assert pick["seeds"] == [winner.best_seed] and not isinstance(head.model_, EnsembleModel)
        assert kept == pytest.approx(max(winner.validation))
        assert pick["test"] == pytest.approx(winner.test[winner.seeds.index(winner.best_seed)])
    assert metrics["mixer"] == winner.mixer
    for name in ("config.json", "weights.safetensors", "metrics.json", "layer_weights.json", "layer_weights.png"):
        assert (result.best / name).is_file(), name
    assert head.predict(cache, "test").predictions["topic"].labels.shape == (cache.num_examples("test"),)
    # The loaded run's own pass over the test split scores what the sweep combined from its runs' passes.
    assert selection.score(head.score(cache, "test")) == pytest.approx(pick["test"])
    return head


@pytest.mark.parametrize("pick", ["seeds", "best-seed"])
def test_the_pick_of_a_winner_trained_by_minibatches(planted, tmp_path, pick):
    result = sweep(planted, out=tmp_path / "s", tasks="topic", candidates=["scalar"], seeds=3, pick=pick,
                   budget=None, **QUICK)
    head = assert_pick_is_the_run(result, planted, pick)
    assert result.ranking == ("averaged" if pick == "seeds" else "mean")
    if pick == "seeds":
        assert len(head.model_.members) == 3
        history = json.loads((result.best / "metrics.json").read_text())["history"]
        assert history["seeds"] == [0, 1, 2] and len(history["members"]) == 3
        # The leaderboard's "seeds averaged" scores are the pick's own.
        assert result.winner.averaged == pytest.approx({k: result.pick[k] for k in ("validation", "test")})
    with pytest.raises(ConfigError, match="Unknown pick 'all'; choose one of seeds, best-seed"):
        sweep(planted, out=tmp_path / "bad", candidates=["scalar"], pick="all", budget=None, **QUICK)


def test_the_leaderboard_json_round_trips(swept):
    on_disk = json.loads((swept.out / "sweep.json").read_text())
    assert on_disk == json.loads(json.dumps(swept.to_json()))
    again = SweepResult.read(swept.out)
    assert again.to_json() == swept.to_json()
    assert [c.candidate for c in again.leaderboard] == [c.candidate for c in swept.leaderboard]
    assert on_disk["best_candidate"] == swept.winner.candidate and on_disk["test_split"] == "test"
    assert on_disk["leaderboard"][0]["validation"]["mean"] == pytest.approx(swept.leader.validation_mean)
    assert on_disk["confidence"] == 0.95


def test_the_ensemble_of_the_top_candidates_is_scored_and_written(swept, planted):
    ensemble = swept.ensemble
    assert [m["candidate"] for m in ensemble["members"]] == [c.candidate for c in swept.leaderboard[:2]]
    for m, c in zip(ensemble["members"], swept.leaderboard):
        assert m["seeds"] == (c.seeds if len(c.seeds) > 1 else [c.best_seed])  # each as --pick seeds keeps it
    assert 0 <= ensemble["validation"] <= 1 and 0 <= ensemble["test"] <= 1
    assert set(ensemble["validation_metrics"]["topic"]) >= {"accuracy", "macro_f1", "mcc"}
    head = LayerHead.load(ensemble["run"])
    assert isinstance(head.model_, EnsembleModel) and len(head.model_.members) == 2
    assert head.fit_["members"] == [c.candidate for c in swept.leaderboard[:2]]
    selection = Selection.from_json(swept.selection)
    assert selection.score(head.score(planted, "test")) == pytest.approx(ensemble["test"])


def test_fitting_from_a_feed_pool_gives_the_same_head_and_reads_each_feed_once(planted):
    pool = FeedPool(planted)
    alone = LayerHead("scalar", tasks=["topic"], seed=1, **QUICK).fit(planted)
    pooled = LayerHead("scalar", tasks=["topic"], seed=1, **QUICK).fit(planted, feeds=pool)
    LayerHead("scalar", tasks=["topic"], seed=2, **QUICK).fit(planted, feeds=pool)
    assert pool.built == 2 and pool.served == 4  # train and validation, built once for two fits
    for (name, a), (_, b) in zip(alone.model_.state_dict().items(), pooled.model_.state_dict().items()):
        assert np.array_equal(a.numpy(), b.numpy()), name
    with lc.LayerCache.open(planted.path) as other, pytest.raises(ConfigError, match="reads another cache"):
        LayerHead("scalar", tasks=["topic"], **QUICK).fit(other, feeds=pool)


def test_runs_of_several_seeds_can_share_one_validation_slice(planted, monkeypatch):
    monkeypatch.setattr(planted, "validation_split", lambda exclude=None: None)  # as a cache with train only
    heads = [LayerHead("scalar", tasks=["topic"], seed=seed, val_seed=val_seed, **QUICK).fit(planted)
             for seed, val_seed in ((1, 5), (2, 5), (2, None))]
    rows = [h.validation_pass_.predictions["topic"].rows for h in heads]
    assert heads[0].data_["validation"] == heads[1].data_["validation"] == (
        "train (seeded stratified 10% slice, seed 5)")
    assert np.array_equal(rows[0], rows[1]) and not np.array_equal(rows[1], rows[2])
    assert heads[2].data_["validation"].endswith("seed 2)")  # by default the slice follows the seed


# --- the budget -------------------------------------------------------------------------------------
def test_training_starts_no_epoch_past_its_deadline(planted):
    pool = FeedPool(planted)
    tasks = [planted.manifest.task("topic")]
    model = HeadModel(len(planted.layer_names), planted.hidden_size, tasks, mixer="scalar")
    train = pool.feed("train", tasks=["topic"], source="pooled:mean")
    val = pool.feed("validation", tasks=["topic"], source="pooled:mean")
    history = train_model(model, train, val, TrainConfig(epochs=50, patience=0), progress=False,
                          deadline=time.perf_counter())
    assert len(history.epochs) == 1 and history.out_of_time and history.best_epoch == 1
    history = train_model(model, train, val, TrainConfig(epochs=2, patience=0), progress=False,
                          deadline=time.perf_counter() + 3600)
    assert len(history.epochs) == 2 and not history.out_of_time


def test_a_small_budget_runs_fewer_candidates_and_ends_in_time(planted, tmp_path):
    budget = 2.0
    result = sweep(planted, out=tmp_path / "s", tasks="topic", budget=budget, seeds=3,
                   candidates=["layer:1", "scalar", "attention", "adaptive", "gumbel", "act"],
                   **{**QUICK, "epochs": 60})
    assert result.elapsed <= budget + 0.5  # at most a part of one epoch of a candidate nothing predicted yet
    ran = {c.candidate for c in result.leaderboard}
    assert "layer:1" in ran and len(ran) < 6
    reasons = " ".join(s["reason"] for s in result.skipped) + " ".join(c.note for c in result.leaderboard)
    assert "budget" in reasons
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["budget_seconds"] == budget


def test_a_budget_too_small_for_anything_is_refused_in_one_sentence(planted, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"^The budget of .* ran out while the sweep opened and checked the cache .*; "
                                          r"give a budget of at least \d+s\.$"):
        sweep(planted, out=tmp_path / "a", tasks="topic", budget=1e-6, **QUICK)
    module = importlib.import_module("layercache.heads.sweeps.sweep")  # the module, not the function
    fit = module._Sweep._fit

    def slow_fit(self, *args):
        time.sleep(0.3)
        return fit(self, *args)

    monkeypatch.setattr(module._Sweep, "_fit", slow_fit)
    with pytest.raises(ConfigError, match=r"^The budget of 0.2 s is too small to train even one candidate: .* the "
                                          r"first candidate, layer:1, .*; give a budget of at least \d+s\.$"):
        sweep(planted, out=tmp_path / "b", tasks="topic", budget=0.2, candidates=["layer:1"], **QUICK)
    assert not (tmp_path / "b" / "best").exists()


# --- a variant must beat its default ------------------------------------------------------------------
# layer:1 holds the planted signal, layer:0 noise: as a "variant" of layer:0, layer:1 beats it beyond doubt.
NOISE, SIGNAL_VARIANT = Candidate("layer:0"), Candidate("layer:1", base="layer:0")


def test_a_variant_that_beats_its_default_beyond_noise_is_kept(planted, tmp_path):
    result = sweep(planted, out=tmp_path / "s", tasks="topic", candidates=[NOISE, SIGNAL_VARIANT], budget=None,
                   **QUICK)
    variant, default = result.leaderboard
    assert (variant.candidate, default.candidate) == ("layer:1", "layer:0")
    compared = variant.versus_default
    assert default.versus_default is None and compared["default"] == "layer:0"
    assert compared["difference"] == pytest.approx(variant.validation[0] - default.validation[0])
    assert compared["p_better"] > 0.99 and compared["se"] > 0 and compared["resamples"] == 1000
    assert compared["rows"] == planted.num_examples("validation")
    assert result.winner is result.leader is variant and result.pick["candidate"] == "layer:1"


def make_doubtful(monkeypatch) -> None:
    """Every paired comparison keeps its difference but is won in only 60 % of the resamples."""
    ranking = importlib.import_module("layercache.heads.sweeps.ranking")  # where variants meet their defaults
    real = ranking.paired_bootstrap

    def doubtful(*args, **kwargs):
        out = real(*args, **kwargs)
        return dataclasses.replace(out, p_better=0.6)

    monkeypatch.setattr(ranking, "paired_bootstrap", doubtful)


def test_a_variant_that_leads_by_no_more_than_noise_gives_way_to_its_default(planted, tmp_path, monkeypatch):
    make_doubtful(monkeypatch)
    result = sweep(planted, out=tmp_path / "s", tasks="topic", candidates=[NOISE, SIGNAL_VARIANT], budget=None,
                   **QUICK)
    assert result.leader.candidate == "layer:1" and result.winner.candidate == "layer:0"  # ranked first, not kept
    assert result.pick["candidate"] == "layer:0" and LayerHead.load(result.best).mixer == "layer:0"
    assert json.loads((result.out / "sweep.json").read_text())["best_candidate"] == "layer:0"
    assert SweepResult.read(result.out).winner.candidate == "layer:0"
    # confidence=0 keeps whichever candidate leads.
    anyway = sweep(planted, out=tmp_path / "t", tasks="topic", candidates=[NOISE, SIGNAL_VARIANT], budget=None,
                   confidence=0.0, **QUICK)
    assert anyway.winner.candidate == "layer:1" and anyway.pick["candidate"] == "layer:1"


def test_the_leaderboard_says_why_best_is_not_its_leader(planted, tmp_path, monkeypatch):
    make_doubtful(monkeypatch)
    result = sweep(planted, out=tmp_path / "s", tasks="topic", candidates=[NOISE, SIGNAL_VARIANT], budget=None,
                   **QUICK)
    console = Console(record=True, width=200)
    render_leaderboard(result, console)
    text = " ".join(console.export_text().split())
    for fact in ("vs default", "won 60% of the paired resamples", "best/ holds layer:0, not the leader layer:1",
                 "under the 95% a variant needs", "it is kept over its default only from 95% (--confidence)"):
        assert fact in text, fact


# --- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"tasks": "genre"}, "The cache has no task 'genre'; its tasks are: "),
    ({"budget": "soon"}, "The budget 'soon' is not a duration"),
    ({"seeds": 0}, "seeds must be at least 1"),
    ({"ensemble": -1}, "ensemble is the number of top candidates"),
    ({"confidence": 1.0}, "confidence is a share of resamples from 0"),
    ({"confidence": -0.1}, "confidence is a share of resamples from 0"),
    ({"lr": 0.1}, "The sweep chooses 'lr' for each candidate itself"),
    ({"mixers": ["mean"]}, "Unknown mixer 'mean' to sweep"),
    ({"test_split": "dev"}, "The cache has no split 'dev'"),
    ({"candidates": ["layer:9"]}, "layer index 9 is out of range"),
])
def test_bad_settings_are_refused_before_training(planted, tmp_path, kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        sweep(planted, out=tmp_path / "s", **{"budget": None, **kwargs})
    assert not (tmp_path / "s" / "best").exists()


def test_an_unlabelled_cache_is_refused(tiny_models, tmp_path):
    path = tmp_path / "texts.txt.csv"
    path.write_text("text\n" + "\n".join(f"the lamp {i} is good" for i in range(10)) + "\n")
    cache = lc.extract(str(tiny_models["bert"]), str(path), tmp_path / "c", progress=False, no_labels=True).path
    with pytest.raises(ConfigError, match="holds no labels to learn from; re-extract it with a label column"):
        sweep(cache, out=tmp_path / "s")


def test_single_states_that_prove_dear_wait_behind_the_learning_mixers(planted, tmp_path, monkeypatch):
    """Where a single-state fit takes more than DEFER_SHARE of the budget, the others run after scalar."""
    order = []
    original = sweep_module._Sweep._try

    def recording(self, candidate):
        order.append(candidate.name)
        return original(self, candidate)

    monkeypatch.setattr(sweep_module._Sweep, "_try", recording)
    plan = ["last", "layer:0", "layer:1", "scalar"]
    sweep(planted, out=tmp_path / "cheap", tasks="topic", candidates=plan, seeds=1, budget="10m", **QUICK)
    assert order == plan  # fractions of a second: the registry order
    order.clear()
    monkeypatch.setattr(importlib.import_module("layercache.heads.sweeps.budget"), "DEFER_SHARE", 0.0)  # all too dear
    result = sweep(planted, out=tmp_path / "dear", tasks="topic", candidates=plan, seeds=1, budget="10m", **QUICK)
    assert order == ["last", "scalar", "layer:0", "layer:1"]
    assert {c.candidate for c in result.leaderboard} == set(plan)  # deferred, not dropped
    order.clear()
    sweep(planted, out=tmp_path / "none", tasks="topic", candidates=plan, seeds=1, budget=None, **QUICK)
    assert order == plan  # without a budget nothing is dear
