"""LiveBundle: trained runs on the live backbone predict what they predict from the cache, in one forward pass."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

import layercache as lc
from layercache.errors import CacheMismatchError, ConfigError
from layercache.live import LiveBundle, attach

HEAD_NAMES = ["topic", "scope", "intensity", "sentiment"]


def cache_inputs(cache_path, records, split="validation"):
    """The word lists of a cache split's rows, in cache row order."""
    cache = lc.LayerCache.open(cache_path)
    words = records.splits[split].words
    return cache, [words[int(i)] for i in cache.example_index(split)]


def assert_same_as_cache(bundle, runs, cache, inputs, split="validation"):
    result = bundle.predict(inputs, batch_size=5)
    for name, run in runs.items():
        cached = lc.LayerHead.load(run).predict(cache, split).predictions
        live = result[name]
        for task, expected in cached.items():
            got = live[task]
            if expected.task.kind == "token":
                assert len(got.labels) == len(expected.labels)
                agree = np.mean(np.concatenate([a == b for a, b in zip(got.labels, expected.labels)]))
                assert agree >= 0.97, (name, task, agree)  # fp16 rounding may flip a near-tie
            elif expected.task.kind == "regression":
                np.testing.assert_allclose(got.labels, expected.labels, rtol=1e-2, atol=1e-2 * np.abs(
                    expected.labels).max())
            else:
                np.testing.assert_allclose(got.probabilities, expected.probabilities, atol=2e-3)
                top2 = np.sort(expected.probabilities, axis=1)[:, -2:]
                clear = (top2[:, 1] - top2[:, 0]) > 1e-2  # labels agree except at near-ties
                np.testing.assert_array_equal(got.labels[clear], expected.labels[clear])
    return result


@pytest.mark.parametrize("name", ["bert", "bert-stride", "gpt2"])
def test_bundle_predicts_what_the_cache_predicts(live_caches, runs, records, name):
    cache, inputs = cache_inputs(live_caches[name], records)
    bundle = LiveBundle.from_runs(list(runs[name].values()), device="cpu")
    assert [h.name for h in bundle.heads] == HEAD_NAMES
    assert bundle.words  # a token head: inputs go in as words
    assert bundle.forward.stops_early
    result = assert_same_as_cache(bundle, runs[name], cache, inputs)
    if name == "bert-stride":
        assert bundle.stride == 4 and bundle.max_length == 12
        assert cache.manifest.splits["validation"].n_windowed > 0  # windows were stitched
    if name == "gpt2":
        assert bundle.heads[0].head.model_.mean_skip_first
    # Texts (split on whitespace) give the same predictions as the word lists.
    texts = bundle.predict([" ".join(w) for w in inputs], batch_size=3)
    for h in result.heads:
        for task, p in h.tasks.items():
            q = texts[h.name][task]
            if p.task.kind == "token":
                assert all(np.array_equal(a, b) for a, b in zip(p.labels, q.labels))
            else:
                np.testing.assert_allclose(p.labels, q.labels, rtol=1e-5, atol=1e-5)


def count_calls(module):
    calls = []
    handle = module.register_forward_pre_hook(lambda *args: calls.append(1))
    return calls, handle


def test_one_forward_per_batch_and_it_stops_at_the_deepest_state(live_caches, runs, records):
    _, inputs = cache_inputs(live_caches["bert"], records)
    shallow = LiveBundle.from_runs([runs["bert"][n] for n in ("topic", "scope", "intensity")], device="cpu")
    assert shallow.keep == [1]  # layer_1 only
    model = shallow.backbone.model
    blocks = model.encoder.layer
    calls, h1 = count_calls(model)
    ran = {i: [] for i in range(len(blocks))}
    hooks = [b.register_forward_hook(lambda m, a, o, i=i: ran[i].append(1)) for i, b in enumerate(blocks)]
    result = shallow.predict(inputs, batch_size=5)
    n_batches = -(-len(inputs) // 5)
    assert len(calls) == n_batches  # one forward pass per batch serves all three heads
    assert len(ran[0]) == n_batches and ran[1] == []  # layer_2 never ran
    assert len(result.heads) == 3
    # A head reading the last state makes the pass run every layer, still once per batch.
    full = LiveBundle.from_runs(list(runs["bert"].values()), device="cpu")
    assert full.keep == [0, 1, 2]
    for h in (h1, *hooks):
        h.remove()
    calls, h1 = count_calls(full.backbone.model)
    last = []
    h2 = full.backbone.model.encoder.layer[1].register_forward_hook(lambda *a: last.append(1))
    full.predict(inputs, batch_size=4)
    assert len(calls) == len(last) == -(-len(inputs) // 4)
    h1.remove()
    h2.remove()


@pytest.mark.parametrize("kind", ["gpt2", "llama", "t5", "bart"])
def test_partial_forward_equals_the_full_forward(tiny_models, kind):
    from layercache.backbone.loader import load_backbone
    from layercache.live.forward import PartialForward

    backbone = load_backbone(str(tiny_models[kind]), device="cpu")
    forward = PartialForward(backbone)
    assert forward.stops_early
    enc = backbone.tokenizer(["the film was good", "not at all"], padding=True, return_tensors="pt")
    full = backbone.hidden_states(enc["input_ids"], enc["attention_mask"])
    for keep in ([0], [1], [0, backbone.n_layers - 1], list(range(backbone.n_layers + 1))):
        got = forward.states(enc["input_ids"], enc["attention_mask"], keep)
        assert sorted(got) == sorted(keep)
        for k in keep:
            assert torch.equal(got[k], full[k]), (kind, k)


def test_a_seed_ensemble_run_predicts_live_what_it_predicts_from_the_cache(live_caches, records, tmp_path):
    """A run that averages seeds (``train-head --seeds``, a sweep's pick) goes live like any other."""
    cache, inputs = cache_inputs(live_caches["bert"], records)
    head = lc.LayerHead("scalar", tasks=["sentiment", "negation_scope"], seeds=2, epochs=2, batch_size=8,
                        progress=False).fit(cache)
    run = head.save(tmp_path / "seeds")
    bundle = LiveBundle.from_runs([run], device="cpu")
    assert_same_as_cache(bundle, {"seeds": run}, cache, inputs)


def test_save_and_load_round_trip(live_caches, runs, records, tmp_path):
    _, inputs = cache_inputs(live_caches["bert"], records)
    bundle = LiveBundle.from_runs(list(runs["bert"].values()), device="cpu")
    before = bundle.predict(inputs).rows()
    folder = bundle.save_pretrained(tmp_path / "bundle")
    config = json.loads((folder / "live_bundle.json").read_text())
    assert config["backbone"]["fingerprint"] == bundle.backbone.fingerprint
    assert not list(folder.rglob("*.bin")) and not list(folder.rglob("*.pt"))
    assert len(list(folder.rglob("*.safetensors"))) == len(HEAD_NAMES)
    assert not list(folder.rglob("model.safetensors"))  # the backbone is referenced, not copied
    again = LiveBundle.from_pretrained(folder, device="cpu")
    assert [h.name for h in again.heads] == HEAD_NAMES
    assert again.predict(inputs).rows() == before
    config["backbone"]["fingerprint"] = "xxh3_128-files:" + "0" * 32
    (folder / "live_bundle.json").write_text(json.dumps(config))
    with pytest.raises(CacheMismatchError, match="different weights"):
        LiveBundle.from_pretrained(folder, device="cpu")
    with pytest.raises(ConfigError, match="not a live bundle"):
        LiveBundle.from_pretrained(tmp_path, device="cpu")


def test_attach_on_a_model_in_memory_predicts_the_same(live_caches, runs, records, tiny_models):
    _, inputs = cache_inputs(live_caches["bert"], records)
    run_list = list(runs["bert"].values())
    expected = LiveBundle.from_runs(run_list, device="cpu").predict(inputs).rows()
    model = transformers.AutoModel.from_pretrained(str(tiny_models["bert"])).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_models["bert"]))
    bundle = attach(model, tokenizer, run_list)
    assert bundle.backbone.model is model  # no copy of the weights
    assert bundle.predict(inputs).rows() == expected
    with pytest.raises(ConfigError, match="eval"):
        attach(model.train(), tokenizer, run_list)
    other = transformers.AutoModel.from_pretrained(str(tiny_models["gpt2"])).eval()
    with pytest.raises(CacheMismatchError, match="load the backbone the run was trained with"):
        attach(other, transformers.AutoTokenizer.from_pretrained(str(tiny_models["gpt2"])), run_list)


def test_bad_input_is_refused_in_one_sentence(live_caches, runs):
    with pytest.raises(ConfigError, match="at least one run"):
        LiveBundle.from_runs([])
    with pytest.raises(CacheMismatchError, match="another backbone"):
        LiveBundle.from_runs([runs["bert"]["topic"], runs["gpt2"]["topic"]], device="cpu")
    with pytest.raises(ConfigError, match=r"the same max_length=\.\.\. and stride=\.\.\."):
        LiveBundle.from_runs([runs["bert"]["topic"], runs["bert-stride"]["topic"]], device="cpu")
    bundle = LiveBundle.from_runs([runs["bert"]["topic"]], device="cpu")
    assert not bundle.words
    with pytest.raises(ConfigError, match="empty"):
        bundle.predict(["a good film", "   "])
    with pytest.raises(ConfigError, match="Nothing to predict"):
        bundle.predict([])
    with pytest.raises(ConfigError, match="not a layercache run folder"):
        LiveBundle.from_runs([live_caches["bert"]])
    # A GPT-2 loaded in place of the BERT its runs came from.
    gpt2 = lc.LayerHead.load(runs["gpt2"]["topic"]).cache_info_.model
    with pytest.raises(CacheMismatchError, match="load the backbone the run was trained with"):
        LiveBundle.from_runs([runs["bert"]["topic"]], backbone=gpt2, device="cpu")
