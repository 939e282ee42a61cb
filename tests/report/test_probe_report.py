"""probe_report: every analysis from the cache, one JSON that is the report, one self-contained HTML page."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from layercache.errors import ConfigError
from layercache.report.figures import FIGURES, report_figures
from layercache.report.probing import ProbeReport, build_probe_report, find_runs, probe_report
from layercache.store.reader import LayerCache


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as JavaScript's JSON.parse does."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_report_round_trips_through_its_json(built_report):
    report, paths = built_report
    again = ProbeReport.load(paths.json)
    assert again == report
    assert ProbeReport.from_json(_strict_json(paths.json.read_text())).to_json() == report.to_json()
    assert ProbeReport.load(paths.folder) == report  # the folder works as well as the file


def test_every_part_is_there_for_every_task_kind(built_report, report_cache):
    report, _ = built_report
    with LayerCache.open(report_cache) as cache:
        L, tasks = len(cache.layer_names), {t.name: t for t in cache.tasks}
    assert set(report.tasks) == set(tasks)
    assert report.meta["eval_split"] == "test"
    for name, t in report.tasks.items():
        probe = t["probe"]
        assert len(probe["validation"]) == len(probe["eval"]) == len(probe["C"]) == L
        assert probe["best_layer"] == report.layer_names[int(np.argmax(probe["validation"]))]
        assert len(t["cumulative"]["scores"]) == L and len(t["cumulative"]["mix_weights"]) == L
        if tasks[name].kind == "regression":
            assert t["metric"] == "r2" and not {"control", "mdl", "prediction_depth"} & set(t)
        else:
            sel = np.asarray(t["control"]["selectivity"])
            assert np.allclose(sel, np.asarray(probe["eval"]) - np.asarray(t["control"]["eval"]))
            assert len(t["mdl"]["codelength_bits"]) == L
            assert sum(t["prediction_depth"]["counts"]) > 0
    cka = np.asarray(report.similarity["cka"])
    assert cka.shape == (L, L) and np.allclose(np.diag(cka), 1.0)
    assert [r["mixer"] for r in report.runs] == ["act"]  # the act head trained for the report
    td = report.token_depth
    assert td["n_tokens"] > 0 and 1.0 <= td["mean"] <= L
    families = td["by_category"]["families"]
    assert {"token_type", "word_position", "frequency"} <= set(families)
    assert {r["category"] for r in families["token_type"]} >= {"special", "word"}
    assert all(part >= 0 for part in report.timings.values())


def test_the_act_head_trained_for_the_report_is_labelled_a_quick_estimate(built_report):
    """Its score must not read as a converged head's (sentiment 0.603 beside adaptive's 1.000 before)."""
    report, _ = built_report
    about = "quick depth estimate: act head trained 2 epochs for this report"
    assert report.token_depth["about"] == about
    (act,) = [r for r in report.runs if r["mixer"] == "act"]
    assert act["quick_estimate"] is True and act["about"] == about


def test_the_console_announces_the_act_head_and_the_sample(report_cache, tmp_path):
    lines = []
    probe_report(report_cache, tmp_path / "r", tasks=["sentiment"], mdl=False, cumulative=False, act_epochs=1,
                 progress=False, say=lines.append)
    assert lines[0].startswith("Probes fit on a seeded sample of at most 4,000 training examples")
    assert lines[1] == ("Training an act head for per-token depth: a quick 1-epoch estimate; pass act_run=... for a "
                        "converged one.")


def test_html_is_self_contained_with_every_figure(built_report):
    report, paths = built_report
    page = paths.html.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from anywhere
    assert "<script" not in page
    shown = re.findall(r'data-figure="([a-z_]+)"', page)
    expected = [spec.key for spec, _ in report_figures(report)]
    assert shown == expected
    assert {"scores", "mdl", "cumulative", "layer_weights", "similarity", "prediction_depth", "token_depth"} <= set(
        shown)
    assert set(shown) <= {spec.key for spec in FIGURES}
    for task in report.tasks:
        assert task in page


def test_runs_of_another_cache_are_refused(built_report, report_cache, tiny_models, tmp_path):
    import layercache

    other = tmp_path / "other"
    layercache.extract(str(tiny_models["bert"]), "builtin", other, limit=60, progress=False)
    with LayerCache.open(report_cache) as cache:
        act_run = find_runs(cache, [built_report[0].runs[0]["path"]])
        assert len(act_run) == 1
    with LayerCache.open(other) as cache, pytest.raises(ConfigError, match="trained on another cache"):
        find_runs(cache, [built_report[0].runs[0]["path"]])


def test_refusals(report_cache, tmp_path):
    with LayerCache.open(report_cache) as cache:
        with pytest.raises(ConfigError, match="no task 'nope'"):
            build_probe_report(cache, tasks=["nope"])
        with pytest.raises(ConfigError, match="no split 'dev'"):
            build_probe_report(cache, eval_split="dev")
    (tmp_path / "x.json").write_text('{"format": "something else"}')
    with pytest.raises(ConfigError, match="not a layercache probe report"):
        ProbeReport.load(tmp_path / "x.json")
    with pytest.raises(ConfigError, match="no report"):
        ProbeReport.load(tmp_path / "missing.json")


def test_a_cache_without_vocabulary_still_gets_its_report(report_cache, built_report, monkeypatch):
    """A cache from before vocab.json loses only the token categories, with a note saying how to add them."""
    import layercache.depth as depth
    from layercache.errors import CacheError

    def no_vocabulary(cache, split=None, **kwargs):
        raise CacheError("The cache has no tokenizer vocabulary; run the same extract command again.")

    monkeypatch.setattr(depth, "token_categories", no_vocabulary)
    with LayerCache.open(report_cache) as cache:
        report = build_probe_report(cache, tasks=["sentiment"], mdl=False, cumulative=False,
                                    act_run=built_report[0].runs[0]["path"])
    assert report.token_depth is None
    assert any("no tokenizer vocabulary" in note for note in report.notes)
    assert report.tasks["sentiment"]["probe"]["best_layer"]


@pytest.mark.parametrize("asked", [{"tasks": ["nope"]}, {"eval_split": "nope"}])
def test_a_task_or_split_the_cache_lacks_is_refused_before_an_act_head_is_trained(report_cache, tmp_path, asked):
    """The report trained its quick act head (minutes on a real cache) before it found the task it was asked for
    missing; now the refusal comes first and nothing is written."""
    with pytest.raises(ConfigError, match="nope"):
        probe_report(report_cache, tmp_path / "r", progress=False, **asked)
    assert not (tmp_path / "r").exists()
