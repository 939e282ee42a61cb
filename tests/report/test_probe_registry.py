"""The report fits every registered probe: a probe module dropped into layercache/probes/ shows up in its data.

Also: the probes of one task read its word features once (shared), with the same scores as reading them
one probe at a time.
"""

from __future__ import annotations

import io
import sys
import textwrap

import numpy as np
import pytest
from rich.console import Console
from sklearn.base import clone

from layercache.store.reader import LayerCache

NORM_PROBE = """
    import numpy as np

    from layercache.probes.base import Probe
    from layercache.probes.features import read_inputs
    from layercache.probes.registry import register_probe


    @register_probe("zz_norm")
    class NormProbe(Probe):
        '''The mean norm of each layer's states (no learning: it only shows where a new probe's result lands).'''

        def __init__(self, task=None, seed=0, max_train=None):
            self.task = task
            self.seed = seed
            self.max_train = max_train

        def fit(self, cache, split="train"):
            setup = self._setup(cache, split)
            inputs = read_inputs(cache, split, setup.spec, setup.source, setup.index)
            self.layer_names_ = setup.names
            self.scores_ = np.linalg.norm(inputs.X, axis=2).mean(1)
            self.metric_ = "mean norm"
            return self
"""


@pytest.fixture
def norm_probe(tmp_path, monkeypatch):
    """Registers ``zz_norm`` from a module in a temporary folder on the probes package's path; undone after."""
    import layercache.probes as probes
    from layercache.probes import registry

    monkeypatch.setattr(registry.PROBES, "_entries", dict(registry.PROBES))  # forget the new class after
    (tmp_path / "zz_norm.py").write_text(textwrap.dedent(NORM_PROBE))
    monkeypatch.setattr(probes, "__path__", [*probes.__path__, str(tmp_path)])
    yield "zz_norm"
    sys.modules.pop("layercache.probes.zz_norm", None)


def test_a_probe_module_dropped_in_appears_in_the_report(norm_probe, report_cache):
    from layercache.report.html import render_html
    from layercache.report.probing import build_probe_report, count_steps
    from layercache.report.summary import render_probe_summary

    steps = []
    with LayerCache.open(report_cache) as cache:
        tasks = ["negation_scope", "intensity"]  # a token task and a regression
        report = build_probe_report(cache, tasks=tasks, mdl=False, cumulative=False, step=steps.append)
        L = len(cache.layer_names)
        expected_steps = count_steps(cache, tasks, report.meta["eval_split"], False, False, token_depth=False)
    for task in tasks:
        part = report.tasks[task]["per_layer"][norm_probe]
        assert part["metric"] == "mean norm" and len(part["validation"]) == L
        assert part["eval"] is None  # the probe scores no split
        assert part["best_layer"] == report.layer_names[int(np.argmax(part["validation"]))]
        assert "mdl" not in report.tasks[task] and "cumulative" not in report.tasks[task]
    assert any(norm_probe in s for s in steps) and len(steps) == expected_steps
    assert f"{norm_probe} (mean norm)" in render_html(report)  # a column of the task's per-layer table
    console = Console(file=io.StringIO(), width=200)
    render_probe_summary(report, console)
    assert f"{norm_probe} mean norm" in console.file.getvalue()


def test_every_registered_probe_is_a_scikit_learn_estimator():
    from layercache.probes.base import Probe
    from layercache.probes.registry import PROBES

    assert list(PROBES.load())[:3] == ["linear", "mdl", "cumulative"]
    for name, cls in PROBES.items():
        assert issubclass(cls, Probe), name
        probe = cls(task="t", seed=3, max_train=100)
        assert clone(probe).get_params() == probe.get_params()
        assert not [k for k in vars(probe) if k.endswith("_")]  # fitted attributes come from fit only


def test_a_tasks_probes_share_one_read_of_its_word_features(report_cache, monkeypatch):
    from layercache.probes import CumulativeProbes, LinearProbes, OnlineCodeMDL, features

    reads = []
    original = features._read_words
    monkeypatch.setattr(features, "_read_words", lambda *a: reads.append(a[1]) or original(*a))

    def fit_all(cache):
        probes = LinearProbes(task="negation_scope", max_train=300).fit(cache)
        control = LinearProbes(task="negation_scope", control=True, max_train=300).fit(cache)
        mdl = OnlineCodeMDL(task="negation_scope", max_train=300).fit(cache)
        cum = CumulativeProbes(task="negation_scope", max_train=300).fit(cache, probes=probes)
        return (probes.scores_, probes.score(cache, "test"), control.score(cache, "test"), mdl.codelength_,
                cum.scores_, cum.score(cache, "test"))

    with LayerCache.open(report_cache) as cache:
        alone = fit_all(cache)
        n_alone, reads[:] = len(reads), []
        with features.sharing_word_features():
            shared = fit_all(cache)
    assert sorted(reads) == sorted(set(reads)) and n_alone > len(reads)  # each split once
    for a, b in zip(alone, shared):
        np.testing.assert_array_equal(a, b)

    reads[:] = []
    with LayerCache.open(report_cache) as cache, features.sharing_word_features(budget=0) as none_kept:
        bounded = fit_all(cache)  # nothing fits: every probe reads its own parts, as without sharing
    assert none_kept.kept == 0 and len(reads) == n_alone
    for a, b in zip(alone, bounded):
        np.testing.assert_array_equal(a, b)


def test_the_report_finds_per_token_depth_mixers_in_the_registry():
    from layercache.heads.mixers.registry import MIXERS, per_token_depth_mixers

    assert per_token_depth_mixers() == ["act"]  # the report trains and reads these, never a name of its own
    assert not any(cls.per_token_depth for name, cls in MIXERS.items() if name != "act")


def test_runs_show_the_metric_they_selected_on(built_report):
    from layercache.heads.run_folders.run_files import RunFiles

    report, _ = built_report
    (run,) = report.runs
    selected = RunFiles.read(run["path"]).metrics.selection
    assert selected and {task: s["metric"] for task, s in run["scores"].items()} == selected
