"""The plan before writing: each storage choice priced in bytes, timed, judged against the free space (issue 28)."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest

from layercache.core.option_names import speaking_to_command_line
from layercache.errors import InsufficientDiskError
from layercache.extraction import job, measure, pricing
from layercache.extraction.configuration import new_manifest
from layercache.extraction.estimate import estimate_bytes, projection_bytes
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec
from layercache.extraction.storage_choices import (
    NO_CACHE,
    POOLED,
    TOKENS,
    PricedChoice,
    StorageChoice,
    choice_bytes,
    recommend,
    standard_choices,
)
from layercache.planning.plan import plan_cache
from layercache.store.manifest import SplitInfo

PROBE = 2**20  # a small disk probe keeps the tests fast


@pytest.fixture
def plan_of(tiny_models, tsv, tmp_path):
    """plan_cache on the tiny BERT and 12 reviews, with a 1 MiB disk probe; keywords pass through."""
    def make(**options):
        options.setdefault("disk_probe_bytes", PROBE)
        options.setdefault("sample_batches", 1)
        options.setdefault("quality_examples", 0)  # the quality check has its tests in tests/planning
        return plan_cache(str(tiny_models["bert"]), DataSpec(str(tsv)), options.pop("storage", None),
                          out=tmp_path / "cache", **options)
    return make


@pytest.fixture
def inputs(tiny_models, tsv):
    """The tiny BERT's loaded inputs for the 12 reviews, and a manifest maker for a storage dtype and store."""
    loaded = job.load_inputs(str(tiny_models["bert"]), DataSpec(str(tsv)), StorageSpec(), BatchSpec(),
                             allow_pickle=False)

    def manifest(storage_dtype="float16", store="tokens"):
        return new_manifest(loaded.backbone, loaded.records, loaded.plans, keep=loaded.keep, store=store,
                            pooling=["mean"], storage_dtype=storage_dtype, stride=None, batch_tokens=8192,
                            batch_size=256, shard_bytes=256 * 2**20, limit=None)
    return loaded, manifest


def test_each_choice_costs_what_its_own_manifest_estimates(plan_of, inputs):
    plan = plan_of()
    loaded, manifest = inputs
    rows = {row.choice: row for row in plan.rows}
    for dtype in ("float16", "bfloat16", "int8"):
        assert rows[StorageChoice(TOKENS, dtype)].bytes == estimate_bytes(manifest(dtype), loaded.plans)
    assert rows[StorageChoice(POOLED, "float16")].bytes == estimate_bytes(manifest(store="pooled"), loaded.plans)
    base = manifest("int8")
    D, S = base.hidden_size, len(base.storage.layers)
    for k in (D // 2, D // 4, D // 8):
        narrow = dataclasses.replace(base, storage=dataclasses.replace(base.storage, project=k))
        assert narrow.hidden_size == k  # the stored width
        # the shards at width k, and the basis file: per state a (k, D) basis and a (D,) mean, float32
        assert rows[StorageChoice(TOKENS, "int8", k)].bytes == estimate_bytes(narrow, loaded.plans)
        assert estimate_bytes(narrow, loaded.plans) - projection_bytes(narrow) == estimate_bytes(
            dataclasses.replace(base, model=dataclasses.replace(base.model, hidden_size=k)), loaded.plans)
        assert projection_bytes(narrow) == S * (k * D + D) * 4
    assert rows[StorageChoice(NO_CACHE)].bytes == 0
    assert plan.yours.choice == StorageChoice(TOKENS, "float16")  # auto resolved, within float16's range
    assert plan.to_json()["choices"][0]["bytes"] == rows[StorageChoice(TOKENS, "float16")].bytes


def _large(manifest, width=1024, tokens=2_000_000):
    """The manifest as if its model were ``width`` wide over a split of ``tokens`` tokens (estimates use averages)."""
    return dataclasses.replace(manifest, model=dataclasses.replace(manifest.model, hidden_size=width),
                               splits={"train": SplitInfo(n_examples=tokens // 200, n_tokens=tokens, n_batches=50)})


def test_int8_halves_float16_and_a_projection_scales_with_its_width(inputs):
    _, manifest = inputs
    big = _large(manifest())
    fp16 = choice_bytes(big, None, StorageChoice(TOKENS, "float16"))
    int8 = choice_bytes(big, None, StorageChoice(TOKENS, "int8"))
    assert 1.9 < fp16 / int8 < 2.05  # one byte a value, plus a 4-byte scale per 1024 values
    S = len(big.storage.layers)
    widths = [512, 256, 128]
    projected = [choice_bytes(big, None, StorageChoice(TOKENS, "int8", k)) for k in widths]
    for k, size in zip(widths, projected):
        assert 0.8 * k / 1024 < size / int8 < 1.25 * k / 1024
        priced = dataclasses.replace(big, storage=dataclasses.replace(big.storage, project=k))
        assert projection_bytes(priced) == S * (k * 1024 + 1024) * 4
    assert projected[0] > projected[1] > projected[2]


def test_int4_is_under_three_tenths_of_float16_and_is_priced_at_every_width_it_stores(inputs):
    _, manifest = inputs
    big = _large(manifest())
    fp16 = choice_bytes(big, None, StorageChoice(TOKENS, "float16"))
    int4 = choice_bytes(big, None, StorageChoice(TOKENS, "int4"))
    assert 0.28 < int4 / fp16 < 0.30  # half a byte a value and a 2-byte scale per 32 values (0.281), float16 means
    rows = standard_choices(big, project=13)
    assert [r.project for r in rows if r.dtype == "int8"] == [None, 512, 256, 128, 13]
    assert [r.project for r in rows if r.dtype == "int4"] == [None, 512, 256, 128]  # 13 is odd: int4 cannot store it
    assert 0.45 < choice_bytes(big, None, StorageChoice(TOKENS, "int4", 512)) / int4 < 0.55


def _row(extraction, read, recompute, *, store=TOKENS, dtype="float16", project=None, fits=True, size=100,
         yours=False):
    choice = StorageChoice(store, None if store == NO_CACHE else dtype, project)
    return PricedChoice(choice, size, size, fits, yours=yours, extraction_s=extraction, epoch_read_s=read,
                        recompute_s=recompute)


def test_pays_after_is_the_first_epoch_count_where_the_cache_is_cheaper():
    row = _row(100.0, 10.0, 60.0)  # 100 + E * 10 < E * 60  <=>  E > 2
    assert row.breakeven_epochs == 2.0 and row.pays_after == 3
    assert _row(90.0, 10.0, 60.0).pays_after == 2  # 1.8 -> 2
    slow = _row(100.0, 60.0, 60.0)  # reading is not faster than recomputing (a GPU beside a slow disk)
    assert math.isinf(slow.breakeven_epochs) and slow.pays_after is None
    shared = _row(100.0, 10.0, 60.0)
    shared.shared_s = 40.0  # the other splits' forward, which a run without a cache spends once too
    assert shared.breakeven_epochs == 60.0 / 50.0 and shared.pays_after == 2
    assert _row(None, None, 60.0).breakeven_epochs is None  # not measured
    assert _row(0.0, None, 60.0, store=NO_CACHE).pays_after is None


def test_recommendation_is_the_most_faithful_choice_that_fits_and_pays(monkeypatch):
    rows = [_row(100, 10, 60, fits=False, yours=True), _row(100, 5, 60, dtype="int8"),
            _row(100, 2, 60, dtype="int8", project=64), _row(100, 1, 60, store=POOLED),
            _row(0, None, 60, store=NO_CACHE)]
    best, text = recommend(rows, 10**9)
    assert best.name == "tokens int8"
    assert "Your choice, tokens float16" in text and "does not fit" in text and "kept as given" in text
    assert "pass store='tokens', storage_dtype='int8' to change it" in text  # a Python caller's keywords
    with speaking_to_command_line():
        assert "pass --store tokens --storage-dtype int8 to change it" in recommend(rows, 10**9)[1]
    projected = [_row(100, 10, 60, fits=False, yours=True), _row(100, 2, 60, dtype="int8", project=64),
                 _row(100, 1, 60, store=POOLED), _row(0, None, 60, store=NO_CACHE)]
    best, text = recommend(projected, 10**9)
    assert best.choice.project == 64 and "project=64" in text
    never = [_row(100, 70, 60, dtype=d, yours=d == "float16") for d in ("float16", "int8")]
    best, text = recommend([*never, _row(0, None, 60, store=NO_CACHE)], 10**9)
    assert best.choice.store == NO_CACHE and "not faster than recomputing" in text
    best, text = recommend([_row(1, 0, 60, fits=False), _row(0, None, 60, store=NO_CACHE)], 10**9)
    assert best.choice.store == NO_CACHE and "no cache fits" in text


def test_fits_follows_the_free_space(plan_of, monkeypatch):
    sizes = {r.choice: r.bytes for r in plan_of(sample_batches=0).rows}
    fp16, int8 = sizes[StorageChoice(TOKENS, "float16")], sizes[StorageChoice(TOKENS, "int8")]
    assert int8 < fp16
    monkeypatch.setattr(pricing, "free_disk_bytes", lambda path: int((int8 + fp16) / 2))
    plan = plan_of()
    fits = {r.choice: r.fits for r in plan.rows}
    assert not fits[StorageChoice(TOKENS, "float16")] and fits[StorageChoice(TOKENS, "int8")]
    assert fits[StorageChoice(NO_CACHE)]
    assert plan.yours.choice == StorageChoice(TOKENS, "float16")  # the user's choice is never changed
    assert "Your choice, tokens float16" in plan.recommendation and "does not fit" in plan.recommendation
    budget = plan_of(disk_budget=int8 // 2)  # a budget below the free space is what fits is judged against
    assert not any(r.fits for r in budget.rows if r.choice.store == TOKENS and not r.choice.project)


def test_timings_are_measured_or_said_not_to_be(plan_of):
    timed = plan_of(sample_batches=2)
    assert timed.forward is not None and timed.forward.tokens_per_second > 0
    row = next(r for r in timed.rows if r.yours)
    assert row.extraction_s > 0 and row.epoch_read_s >= 0 and row.recompute_s > 0 and row.pays_after is not None
    untimed = plan_of(sample_batches=0)
    assert untimed.forward is None and all(r.recompute_s is None for r in untimed.rows)
    assert any("not measured" in note for note in untimed.notes)


def _probes(folder):
    return [p for p in os.listdir(folder) if p.startswith(measure.PROBE_PREFIX)]


def test_the_disk_probe_leaves_nothing_behind(tmp_path, monkeypatch):
    speed = measure.disk_speed(tmp_path, PROBE)
    assert speed.read_bytes_per_second > 0 and speed.write_bytes_per_second > 0 and speed.probe_bytes == PROBE
    assert _probes(tmp_path) == []

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(measure.os, "fsync", full)
    with pytest.raises(OSError):
        measure.disk_speed(tmp_path, PROBE)
    assert _probes(tmp_path) == []


def test_a_disk_that_cannot_be_measured_is_said_so(plan_of, monkeypatch, tmp_path):
    monkeypatch.setattr(measure.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(13, "Permission denied")))
    plan = plan_of()
    assert plan.disk is None and any("disk speed not measured" in n for n in plan.notes)
    assert all(r.epoch_read_s is None for r in plan.rows) and _probes(tmp_path) == []
    assert not (tmp_path / "cache").exists()  # the plan writes no cache


def test_the_disk_refusal_lists_the_choices_that_would_fit(inputs, tmp_path, monkeypatch):
    loaded, manifest = inputs
    fp16 = manifest("float16")
    int8 = estimate_bytes(manifest("int8"), loaded.plans)
    monkeypatch.setattr(job, "free_disk_bytes", lambda path: int(int8 * 1.1))
    with pytest.raises(InsufficientDiskError) as refused:
        job.check_disk(tmp_path / "cache", fp16, loaded.plans)
    text = str(refused.value)
    assert text.splitlines()[0].endswith("as below.")
    lines = {line.split("  ")[0].strip(): line.split() for line in text.splitlines()[1:]}
    assert lines["tokens float16 *"][-1] == "no" and lines["tokens int8"][-1] == "yes"
    assert "not measured" in text and "Recommended: tokens int8" in text
