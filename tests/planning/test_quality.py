"""What each storage choice costs on the user's labels: every choice's cache of the sample written for real from one
forward pass, probes and a quick head on each, against float32, with a paired bootstrap interval."""

from __future__ import annotations

import numpy as np
import pytest

from layercache.extraction.job import load_inputs
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec
from layercache.extraction.storage_choices import POOLED, TOKENS, StorageChoice
from layercache.planning.quality import Z95, Cost, QualityCheck, _training_noise, head_measures, measure_quality
from layercache.planning.sample import TEST, TRAIN, labelled_sample
from layercache.store.reader import LayerCache

SIZES = {"train": 240, "validation": 100}


@pytest.fixture(scope="module")
def sample(tiny_models):
    import layercache.sources.builtin as builtin

    with pytest.MonkeyPatch.context() as mp:
        original = builtin.load_builtin
        mp.setattr(builtin, "load_builtin", lambda seed=0, sizes_=None: original(seed, sizes_ or SIZES))
        inputs = load_inputs(str(tiny_models["bert"]), DataSpec("builtin"), StorageSpec(), BatchSpec(),
                             allow_pickle=False)
    return labelled_sample(inputs, BatchSpec(), examples=200)


CHOICES = [StorageChoice(TOKENS, "float16"), StorageChoice(TOKENS, "int8", 8), StorageChoice(POOLED, "float16")]


@pytest.fixture(scope="module")
def report(sample):
    return measure_quality(sample, CHOICES, StorageSpec(), heads=CHOICES, head_epochs=2)


def test_every_choice_is_measured_on_every_task_it_can_hold(report, sample):
    assert [q.name for q in report.choices] == [c.name for c in CHOICES]
    tasks = {t.name for t in sample.inputs.records.tasks}
    for quality in report.choices[:2]:
        assert set(quality.probes) == set(quality.head) == tasks
    pooled = report.of("pooled float16")
    assert "negation_scope" not in pooled.probes and "negation_scope" not in pooled.head
    assert any("token tasks are not measured" in note for note in pooled.notes)
    assert report.sample == sample.describe()


def test_a_cost_is_the_reference_score_minus_the_choice_s_with_an_interval_around_it(report):
    for quality in report.choices:
        for cost in quality.costs():
            assert cost.loss == pytest.approx(100 * (cost.reference - cost.score), abs=1e-6)
            assert cost.low <= cost.loss <= cost.high
    float16 = report.of("tokens float16")  # float16 rounds the float32 states by 1e-3 of a value:
    assert max(abs(c.loss) for c in float16.probes.values()) < 1  # its probes (at one C) learn the same
    assert all(c.low <= 0 <= c.high for c in float16.head.values())  # its head moves by no more than training does
    worst = report.of("tokens int8 + project 8").worst
    assert worst.high >= max(c.high for c in float16.probes.values())  # 8 of 32 dimensions lose what float16 keeps


def test_a_head_s_interval_counts_what_a_second_training_moves(report):
    """A head's interval holds the bootstrap's error and a training noise (two float32 seeds' difference, or the
    error of it where larger): two seeds that tie by chance still count the rows they disagree on, and a head
    that moved only as training moves it is not read as a loss (float16's moved a 4-epoch MiniLM head 2.6
    points, inside an interval of two seeds)."""
    tied = Cost("accuracy", 0.586, 0.586, 0.0, -2.36, 2.36)  # two seeds, equal scores, 2.36-point bootstrap interval
    assert _training_noise(tied) == pytest.approx(2.36 / Z95)
    apart = Cost("accuracy", 0.60, 0.55, 5.0, 4.0, 6.0)
    assert _training_noise(apart) == 5.0
    float16 = report.of("tokens float16")
    for task, cost in float16.head.items():  # wider than the rows' error alone: the probes' is that
        assert (cost.high - cost.low) / 2 >= Z95 * report.head_noise[task] - 1e-9


def test_the_check_is_a_pure_function_of_the_seed(sample, report):
    again = measure_quality(sample, CHOICES[:1], StorageSpec(), heads=CHOICES[:1], head_epochs=2)
    assert again.choices[0].to_json()["probes"] == report.choices[0].to_json()["probes"]
    assert again.choices[0].to_json()["head"] == report.choices[0].to_json()["head"]


def test_the_caches_of_the_sample_are_left_behind_only_in_a_folder_given(sample, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("LAYERCACHE_HOME", str(home))
    folder = tmp_path / "caches"
    folder.mkdir()
    measure_quality(sample, CHOICES[:1], StorageSpec(), head_epochs=1, folder=folder)
    assert sorted(p.name for p in folder.iterdir()) == ["tokens-float16", "tokens-float32"]
    assert not (home / "latest").exists()  # a scratch cache is never `layercache info`'s most recent one


def test_a_head_is_measured_only_where_asked(sample):
    report = measure_quality(sample, CHOICES[:2], StorageSpec(), heads=CHOICES[1:2], head_epochs=1)
    assert report.choices[0].probes and not report.choices[0].head
    assert report.choices[1].probes and report.choices[1].head
    assert report.to_json()["choices"][0]["head"] is None


def test_plan_and_extract_train_a_head_only_where_it_can_show_a_loss(sample):
    """float16 and bfloat16 only round float32 states: three quick heads (two reference seeds and its own) would
    measure their own training noise, most of the check's time. int8, int4, a projection and pooled vectors get
    one."""
    assert [head_measures(c) for c in CHOICES] == [False, True, True]
    assert head_measures(StorageChoice(TOKENS, "int4")) and not head_measures(StorageChoice(TOKENS, "bfloat16"))
    with QualityCheck(sample, StorageSpec(), head_epochs=1) as check:
        float16 = check.head_if_lossy(CHOICES[0])
        assert float16.probes and not float16.head and any("no quick head" in n for n in float16.notes)
        assert check.head_if_lossy(CHOICES[1]).head


@pytest.fixture(scope="module")
def sentences(tiny_models, tmp_path_factory):
    """A sample of sequence tasks only (the built-in sentences and their sentiment, as TSV files)."""
    from layercache.sources.builtin import load_builtin

    folder = tmp_path_factory.mktemp("sentences")
    files = {}
    for split, records in load_builtin(sizes=SIZES).splits.items():
        files[split] = str(folder / f"{split}.tsv")
        rows = (f"{' '.join(words)}\t{label}" for words, label in zip(records.words, records.labels["sentiment"]))
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    inputs = load_inputs(str(tiny_models["bert"]), DataSpec(dataset=None, split_files=files), StorageSpec(),
                         BatchSpec(), allow_pickle=False)
    return labelled_sample(inputs, BatchSpec(), examples=200)


def test_sequence_probes_read_a_pooled_cache_of_the_very_vectors_a_choice_stores(sentences):
    """Where every task is probed on pooled vectors, a choice's probes read a pooled-only cache of what it would
    store beside its token states (bit for bit: the same projection fit, the same float32 means, the same
    rounding), so the token states, most of a cache's bytes and write time, are written only for a head; choices
    that store the same vectors share one cache."""
    storage = StorageSpec(pooling=("mean", "first"))
    choices = [StorageChoice(TOKENS, "float32"), StorageChoice(TOKENS, "float16"), StorageChoice(TOKENS, "int8"),
               StorageChoice(TOKENS, "int4", 8), StorageChoice(TOKENS, "bfloat16", 16)]
    with QualityCheck(sentences, storage, head_epochs=1) as check:
        stand_ins = {c.name: check._probes_cache(c) for c in choices}
        assert stand_ins["tokens float16"] == stand_ins["tokens int8"]  # float16 means beside int8 tokens
        for choice in choices:
            own = check._cache(choice)
            assert own != stand_ins[choice.name]
            with LayerCache.open(own) as full, LayerCache.open(stand_ins[choice.name]) as vectors:
                assert full.stores_tokens and not vectors.stores_tokens
                for split in (TRAIN, TEST):
                    for mode in storage.pooling:
                        assert np.array_equal(full.pooled(split, mode), vectors.pooled(split, mode)), (choice, mode)
        check.probes(choices[1:3])
        report = check.report()
        assert report.of("tokens float16").to_json()["probes"] == report.of("tokens int8").to_json()["probes"]
        assert "write" not in report.of("tokens int8").timings  # read float16's cache: nothing written for it
