"""Held states: the forward passes of the dtype probe and the ``--project`` fit are packed by the main pass,
so each sampled batch's model forward runs once, and the cache is byte for byte the one a run without them writes."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import layercache as lc
import layercache.extraction.held as held_module
import layercache.extraction.projection_fit as projection_fit
from layercache.backbone.loader import Backbone
from layercache.extraction.held import HeldStates
from layercache.extraction.housekeeping import locked_output
from layercache.extraction.job import join_job, prepare_job
from layercache.extraction.run import assign_shares, merge_shares, write_share
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec

K = 8
LIMIT, BATCH = 40, 8  # 5 batches per split, ~940 tokens: the fit samples every batch of the first split


def _extract(tiny_models, out: Path, monkeypatch, *, budget: int | None = None, passes: bool = False,
             **options) -> tuple[lc.ExtractResult, list[int]]:
    """Extract the tiny BERT with ``--project K`` int8, counting forward passes (their row counts).

    ``budget``: the held states' byte budget (None: the default); ``passes``: one fit pass per state."""
    original, calls = Backbone.hidden_states, []
    options.setdefault("storage_dtype", "int8")
    options.setdefault("quality_examples", 0)  # extraction's own forwards only: the quality check has its tests
    with monkeypatch.context() as mp:
        mp.setattr(Backbone, "hidden_states", lambda self, ids, mask: calls.append(len(ids)) or original(self, ids,
                                                                                                         mask))
        if budget is not None:
            mp.setattr(held_module, "HELD_BYTES", budget)
        if passes:  # a 32-wide state's float64 Gram matrix is 8 KiB: one state per pass, as for a wide model
            mp.setattr(projection_fit, "ACCUMULATOR_BYTES", 32 * 32 * 8)
        result = lc.extract(str(tiny_models["bert"]), "builtin", out, limit=LIMIT, batch_size=BATCH, project=K,
                            progress=False, **options)
    return result, calls


def _n_batches(result) -> int:
    return sum(split.n_batches for split in result.manifest.splits.values())


def _assert_same_shards(a: Path, b: Path) -> None:
    """Every shard dataset of two caches is equal, dtype and bytes; the fitted basis files are equal too."""
    files = sorted(p.relative_to(a) for p in a.rglob("shard-*.h5"))
    assert files and files == sorted(p.relative_to(b) for p in b.rglob("shard-*.h5"))
    for name in files:
        with h5py.File(a / name, "r") as x, h5py.File(b / name, "r") as y:
            names: list[str] = []
            x.visit(lambda key: names.append(key) if isinstance(x[key], h5py.Dataset) else None)
            assert names
            for key in names:
                assert x[key].dtype == y[key].dtype and x[key].shape == y[key].shape, key
                assert x[key][()].tobytes() == y[key][()].tobytes(), f"{name}:{key}"
    assert (a / "projection.safetensors").read_bytes() == (b / "projection.safetensors").read_bytes()


@pytest.fixture(scope="module")
def reference(tiny_models, tmp_path_factory) -> Path:
    """The cache a run that holds nothing writes: every batch forwarded by the fit and again by the main pass."""
    out = tmp_path_factory.mktemp("held") / "reference"
    with pytest.MonkeyPatch.context() as mp:
        result, calls = _extract(tiny_models, out, mp, budget=0)
    train = result.manifest.splits["train"].n_batches
    assert len(calls) == _n_batches(result) + train  # the fit forwarded every train batch, the main pass again
    return out


def test_the_fit_sample_is_forwarded_once_and_the_cache_is_byte_identical(tiny_models, tmp_path, monkeypatch,
                                                                         reference):
    result, calls = _extract(tiny_models, tmp_path / "held", monkeypatch)
    assert len(calls) == _n_batches(result)  # the sampled batches' forwards were packed, not run again
    assert result.manifest.extraction.projection_tokens > 0
    _assert_same_shards(tmp_path / "held", reference)


def test_a_fit_of_several_passes_reads_held_states_instead_of_forwarding_again(tiny_models, tmp_path, monkeypatch,
                                                                              reference):
    result, calls = _extract(tiny_models, tmp_path / "passes", monkeypatch, passes=True)
    assert len(result.manifest.layer_names) > 1  # several states, so several fit passes
    assert len(calls) == _n_batches(result)
    _assert_same_shards(tmp_path / "passes", reference)

    _, unheld = _extract(tiny_models, tmp_path / "unheld", monkeypatch, passes=True, budget=0)
    train = result.manifest.splits["train"].n_batches
    assert len(unheld) == _n_batches(result) + train * len(result.manifest.layer_names)  # every pass forwards
    _assert_same_shards(tmp_path / "unheld", reference)


def test_a_budget_too_small_for_the_sample_forwards_the_rest_again_and_writes_the_same_cache(
        tiny_models, tmp_path, monkeypatch, reference):
    # Room for one of the five sampled batches (tiny BERT: 3 float32 states 32 wide, ~190 tokens a batch).
    budget = 250 * 32 * 4 * 3
    result, calls = _extract(tiny_models, tmp_path / "small", monkeypatch, budget=budget)
    train = result.manifest.splits["train"].n_batches
    assert _n_batches(result) < len(calls) < _n_batches(result) + train  # some held, the rest forwarded again
    _assert_same_shards(tmp_path / "small", reference)


def test_the_dtype_probe_and_the_fit_share_one_forward_of_batch_zero(tiny_models, tmp_path, monkeypatch):
    result, calls = _extract(tiny_models, tmp_path / "auto", monkeypatch, storage_dtype="auto")
    assert result.manifest.storage.dtype == "float16" and result.manifest.extraction.storage_dtype_auto
    assert len(calls) == _n_batches(result)  # the probe's batch 0 is the fit's and the main pass's


def test_a_writer_keeps_only_the_held_batches_of_its_own_share(tiny_models, tmp_path, monkeypatch):
    """Rank 0 prepares (and fits); each writer packs held states only for batches of its share, then frees them."""
    out = tmp_path / "shared"
    data = DataSpec(dataset="builtin", splits=("train",), limit=LIMIT)
    storage = StorageSpec(storage_dtype="int8", project=K)
    batching = BatchSpec(batch_size=BATCH)
    original, calls = Backbone.hidden_states, []
    monkeypatch.setattr(Backbone, "hidden_states", lambda self, ids, mask: calls.append(1) or original(self, ids,
                                                                                                       mask))
    with locked_output(out):
        job = prepare_job(str(tiny_models["bert"]), data, storage, batching, out, ["mean"], overwrite=False,
                          repair=False, allow_pickle=False, progress=False)
        train = job.manifest.splits["train"].n_batches
        assert len(calls) == train and len(job.held) == train  # the fit's forwards, all held
        shares = assign_shares(job.manifest, job.plans, 2)
        mine = shares[0].batches.get("train", ())
        assert 0 < len(mine) < train
        calls.clear()
        write_share(job, shares[0], progress=False)
        assert len(job.held) == 0 and job.held.nbytes == 0  # nothing outlives the writer's pass
        assert len(calls) == 0  # its batches were all held: none forwarded again
        other = join_job(str(tiny_models["bert"]), data, storage, batching, out, ["mean"], allow_pickle=False)
        write_share(other, shares[1], progress=False)  # forwards its own batches, sampled or not
        assert len(calls) == shares[1].n_batches > 0
        assert merge_shares(job).complete


def test_held_states_keep_the_stored_tokens_within_the_budget_and_hand_them_out_once():
    hidden = tuple(torch.randn(2, 5, 4) for _ in range(3))  # L+1 = 3 states, (R, W, D)
    index = torch.tensor([0, 1, 2, 5, 6])  # (t,) two examples of 3 and 2 tokens
    holder = HeldStates(budget_bytes=2 * 5 * 4 * 4)  # two kept float32 states of one batch
    batch = holder.hold("train", 3, hidden, [0, 2], index)
    assert batch is not None and batch.states[1] is None and batch.n_tokens == 5
    np.testing.assert_array_equal(batch.states[2].numpy(), hidden[2].reshape(-1, 4)[index].numpy())
    assert holder.nbytes == batch.nbytes == holder.budget_bytes
    assert holder.hold("train", 4, hidden, [0, 2], index) is None  # over the budget: not held
    assert holder.peek("train", 3) is batch and holder.take("train", 3) is batch
    assert holder.take("train", 3) is None and holder.nbytes == 0  # once
    holder.hold("train", 3, hidden, [0, 2], index)
    holder.keep_only({"validation": [3]})
    assert len(holder) == 0 and holder.nbytes == 0
    assert HeldStates().hold("train", 0, hidden, [0], index) is None  # an empty holder holds nothing
