"""The probe report of a decoder cache: the logit lens, the tuned lens and the linear shortcut side by side."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_support import invoke

import layercache as lc
from layercache.depth import LensOptions
from layercache.report.probing import probe_report

QUICK = {"mdl": False, "cumulative": False, "train_act": False, "progress": False}


@pytest.fixture(scope="module")
def decoder_cache(tiny_models, tmp_path_factory):
    """A tiny GPT-2's cache (its head tied to the embeddings: lens weights) of the built-in train/validation/test."""
    return lc.extract(str(tiny_models["gpt2"]), "builtin", tmp_path_factory.mktemp("lens") / "gpt2", limit=40,
                      storage_dtype="float32", progress=False).path


def test_the_report_scores_three_lenses_per_layer_on_its_split(decoder_cache, tmp_path):
    report, paths = probe_report(decoder_cache, tmp_path / "report", lens=LensOptions(epochs=2, lr=1e-2), **QUICK)
    lenses = report.lenses
    assert lenses is not None and set(lenses["scores"]) == {"logit", "tuned", "linear"}
    assert lenses["split"] == report.meta["eval_split"] == "test"
    names = report.layer_names
    scores = lenses["scores"]
    for s in scores.values():
        assert s["layer_names"] == names and len(s["kl"]) == len(names) and s["kl"][-1] == 0.0
        assert sum(s["depth_counts"]) == s["n_tokens"]
    assert np.mean(scores["tuned"]["kl"][:-1]) < np.mean(scores["logit"]["kl"][:-1])  # held out, not fitted on
    assert lenses["fits"]["tuned"]["settings"]["epochs"] == 2 and lenses["fits"]["linear"]["objective"] == \
        "least_squares"
    # the logit lens part is what it always was: the same numbers as the logit lens's own scores
    np.testing.assert_allclose(report.logit_lens["kl_to_final"], scores["logit"]["kl"])
    html = paths.html.read_text()
    assert 'id="tuned-lens"' in html and "KL tuned" in html and html.count("data:image/png") >= 2
    assert json.loads(paths.json.read_text())["lenses"]["scores"]["tuned"]["kl"] == scores["tuned"]["kl"]
    assert {"tuned lens (fit)", "linear lens (fit)", "lenses (scores)"} <= set(report.timings)


def test_no_tuned_lens_when_asked_or_when_the_states_are_projected(decoder_cache, tiny_models, tmp_path):
    report, _ = probe_report(decoder_cache, tmp_path / "off", tuned_lens=False, **QUICK)
    assert report.lenses is None and report.logit_lens is not None
    projected = lc.extract(str(tiny_models["gpt2"]), "builtin", tmp_path / "projected", limit=20, project=8,
                           progress=False).path
    report, _ = probe_report(projected, tmp_path / "projected-report", **QUICK)
    assert report.lenses is None and any("No tuned lens: the cache stores its states projected" in n
                                         for n in report.notes)


def test_the_command_takes_the_lens_options(decoder_cache, tmp_path, monkeypatch):
    seen = {}

    def record(cache, out, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("layercache.report.probing.probe_report", record)
    invoke("probe-report", str(decoder_cache), "--lens-epochs", "5", "--lens-max-tokens", "300", "--no-tuned-lens")
    assert seen["lens"] == LensOptions(epochs=5, max_tokens=300) and seen["options"].tuned_lens is False
    help_text = invoke("probe-report", "--help").output
    assert "--lens-epochs" in help_text and "--lens-objective" not in help_text and "--tuned-lens" in help_text


def test_a_lens_setting_out_of_range_is_refused_before_any_probe(decoder_cache, tmp_path):
    from cli_support import assert_refused

    result = invoke("probe-report", str(decoder_cache), "--out", str(tmp_path / "r"), "--lens-epochs", "0")
    assert_refused(result, "--lens-epochs must be at least 1 (a whole number), got 0.")
    assert not (tmp_path / "r").exists()


def test_the_command_takes_the_lens_logits_dtype_and_refuses_another(decoder_cache, tmp_path, monkeypatch):
    from cli_support import assert_refused

    assert "--lens-logits-dtype" in invoke("probe-report", "--help").output
    result = invoke("probe-report", str(decoder_cache), "--out", str(tmp_path / "r"), "--lens-logits-dtype", "float16")
    assert_refused(result, "--lens-logits-dtype must be one of float32, bfloat16, got 'float16'.")
    assert not (tmp_path / "r").exists()
    seen = {}

    def record(cache, out, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("layercache.report.probing.probe_report", record)
    invoke("probe-report", str(decoder_cache), "--lens-logits-dtype", "bfloat16")
    assert seen["lens"] == LensOptions(logits_dtype="bfloat16")
