"""Every public call that computes follows the thread policy of ``--threads auto`` (layercache/core/threads.py).

The policy itself is tested in tests/core/test_threads.py; here, that each entry point of the library takes it
(``@computes``), and that a head's fit and a probe's fit really compute with the idle cores, not torch's default.
"""

from __future__ import annotations

import pytest
import torch

PROBE_METHODS = ("fit", "fit_arrays", "predict", "predict_arrays", "predictions", "score", "score_arrays", "correct")
"""The computing methods a probe family may have: every registered family's own must take the policy."""


def computing_calls() -> dict[str, object]:
    """The library's public calls that compute with torch, by name."""
    from layercache.depth import layer_logits, lens_logits, logit_lens
    from layercache.extraction.run import extract
    from layercache.heads import LayerHead, evaluate_run, per_token_usage, sweep, train_head, train_model
    from layercache.live import LiveBundle, parity, train_head_live, verify_cache
    from layercache.live.predict import predict_texts
    from layercache.live.training import LiveLayerHead
    from layercache.planning.plan import plan_cache
    from layercache.probes import selectivity
    from layercache.report.compare import compare_caches, cross_cka
    from layercache.report.probing import build_probe_report, probe_report

    calls = {f.__name__: f for f in (
        extract, plan_cache, train_head, evaluate_run, sweep, train_model, per_token_usage, selectivity,
        probe_report, build_probe_report, logit_lens, layer_logits, lens_logits, verify_cache, parity,
        train_head_live, predict_texts, compare_caches, cross_cka)}
    for name in ("fit", "predict", "score", "evaluate", "from_seeds", "from_members"):
        calls[f"LayerHead.{name}"] = getattr(LayerHead, name)
    calls["LiveLayerHead.fit"] = LiveLayerHead.fit
    calls["LiveBundle.predict"] = LiveBundle.predict
    return calls


def probe_methods() -> dict[str, object]:
    """Each registered probe family's own computing methods (a new family is checked with nothing edited here)."""
    from layercache.probes.registry import probe_class, probe_names

    return {f"{cls.__name__}.{name}": cls.__dict__[name] for cls in map(probe_class, probe_names())
            for name in PROBE_METHODS if name in cls.__dict__}


def test_every_public_computing_call_takes_the_thread_policy():
    calls = {**computing_calls(), **probe_methods()}
    assert {"LinearProbes.fit", "OnlineCodeMDL.fit", "CumulativeProbes.score"} <= set(calls)
    missing = [name for name, call in calls.items() if not getattr(call, "computes", False)]
    assert missing == [], f"not under the thread policy (add @computes from layercache.core.threads): {missing}"


@pytest.fixture
def threads_inside(monkeypatch):
    """``spy(module, name)``: wrap ``module.name`` so that the torch threads it runs with are recorded; returns the
    list they go to."""

    def spy(module, name: str) -> list[int]:
        original, seen = getattr(module, name), []

        def recording(*args, **kwargs):
            seen.append(torch.get_num_threads())
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, recording)
        return seen

    return spy


def test_a_head_fits_and_scores_with_the_idle_cores(cache, thread_policy, threads_inside):
    from layercache.heads import LayerHead, estimator
    from layercache.store.reader import LayerCache

    seen = threads_inside(estimator, "train_model")
    evaluated = threads_inside(estimator, "evaluate")
    head = LayerHead("scalar", tasks=["sentiment"], epochs=1, solver="adamw", device="cpu", progress=False)
    with LayerCache.open(cache) as opened:
        head.fit(opened)
        assert seen == [thread_policy.other] and torch.get_num_threads() == thread_policy.default
        evaluated.clear()  # the fit's own validation passes
        head.score(opened, "validation")
    assert evaluated == [thread_policy.other] and torch.get_num_threads() == thread_policy.default


def test_linear_probes_fit_with_the_idle_cores(cache, thread_policy, threads_inside):
    from layercache.probes import LinearProbes, linear
    from layercache.store.reader import LayerCache

    seen = threads_inside(linear, "fit_logistic")
    with LayerCache.open(cache) as opened:
        LinearProbes(task="sentiment", layers=[0, 1]).fit(opened)
    assert seen and set(seen) == {thread_policy.other}
    assert torch.get_num_threads() == thread_policy.default
