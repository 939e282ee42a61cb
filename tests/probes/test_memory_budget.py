"""Probes under a memory budget (issue 28): the same scores from features read in pieces, and a peak that stays
under the budget.

- Every probe family fitted and scored under a budget far below its splits' features (validation and scoring
  read a layer at a time, cumulative scoring a run of rows at a time) gives exactly the scores of an unlimited
  budget.
- A training sample that does not fit is refused in one sentence; so is a budget below the minimum.
- In a fresh interpreter, probes on a cache whose features are several times the budget peak near the budget
  above the interpreter's own memory (at most 1.5 times it), where the same probes without a budget peak at
  several times it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from layercache.core import memory
from layercache.errors import ConfigError

SMALL = 300_000
"""Bytes: the training samples below fit half of it; not even one layer of a split's features does (read a layer and
a run of rows at a time). The second budget (in the test) fits two layers of the test split (a group of layers)."""


@pytest.fixture
def tiny_budgets(monkeypatch):
    """Budgets below the command-line minimum, for caches of a few hundred kilobytes."""
    monkeypatch.setattr(memory, "MIN_BUDGET", 1)


def fit_everything(cache, spec) -> list[np.ndarray]:
    from layercache.probes import CumulativeProbes, LinearProbes, OnlineCodeMDL

    out = []
    probes = LinearProbes(task=spec.name, max_train=150).fit(cache)
    predicted, target = probes.predictions(cache, "test")
    out += [probes.scores_, probes.grid_losses_, probes.C_, probes.score(cache, "test"), predicted, target]
    if spec.kind != "regression":
        control = LinearProbes(task=spec.name, control=True, max_train=150, max_iter=50).fit(cache)
        out += [control.scores_, control.score(cache, "test")]
        mdl = OnlineCodeMDL(task=spec.name, max_train=150, max_iter=50).fit(cache)
        out += [mdl.codelength_, np.asarray([mdl.n_train_available_])]
    cum = CumulativeProbes(task=spec.name, max_train=150, max_iter=20).fit(cache, probes=probes)
    out += [cum.scores_, cum.losses_, cum.score(cache, "test"), cum.correct(cache, "test")]
    return out


def test_probes_score_the_same_from_features_read_in_pieces(builtin_cache, tiny_budgets, monkeypatch):
    from layercache.probes import parts

    reads = []
    original = parts.SplitPart.read

    def spy(self, layers=None, rows=None):
        reads.append((len(self.index) if layers is None else len(layers), rows is not None))
        return original(self, layers, rows)

    monkeypatch.setattr(parts.SplitPart, "read", spy)
    L = len(builtin_cache.layer_names)
    per_layer = int(builtin_cache.lengths("test").sum()) * builtin_cache.hidden_size * 4  # a layer's word bound
    assert L >= 3 and per_layer > SMALL
    for spec in builtin_cache.tasks:
        unlimited = fit_everything(builtin_cache, spec)
        for budget in (SMALL, int(2 * 2.2 * per_layer)):
            reads[:] = []
            with memory.memory_limit(budget):
                pieces = fit_everything(builtin_cache, spec)
            for a, b in zip(unlimited, pieces):
                np.testing.assert_array_equal(a, b, err_msg=f"{spec.name}, budget {budget}")
            if spec.kind == "token":
                if budget == SMALL:
                    assert any(n == 1 and chunked for n, chunked in reads), "no layer was read a run of rows at a time"
                else:
                    assert any(1 < n < L and not chunked for n, chunked in reads), "no group of layers was read"
                assert any(n == L and chunked for n, chunked in reads), "no run of rows was read with every layer"


def test_a_training_sample_beyond_the_budget_is_refused(builtin_cache, tiny_budgets):
    from layercache.probes import LinearProbes

    spec = next(t for t in builtin_cache.tasks if t.kind == "token")
    with memory.memory_limit(20_000), pytest.raises(ConfigError, match="do not fit half the memory budget"):
        LinearProbes(task=spec.name, max_train=None).fit(builtin_cache)


def test_the_budget_defaults_to_half_the_memory_available_and_refuses_too_little(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 10 << 30)
    assert memory.memory_budget(None) == 5 << 30
    assert memory.current_budget() == 5 << 30
    with memory.memory_limit(1 << 30) as budget:
        assert budget == memory.current_budget() == 1 << 30
        with memory.memory_limit(None):  # a call that passes its default on keeps its caller's budget
            assert memory.current_budget() == 1 << 30
    with pytest.raises(ConfigError, match="below the 64 MiB"):
        memory.memory_budget(1 << 20)
    with pytest.raises(ConfigError, match="number of bytes"):
        memory.memory_budget("1GB")


# --- peak memory, measured ----------------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import numpy as np
    import torch

    torch.set_num_threads(1)
    from layercache import LayerCache
    from layercache.core import memory
    from layercache.probes import CumulativeProbes, LinearProbes

    def status(key):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise SystemExit("no " + key)

    cache_path, budget = sys.argv[1], int(sys.argv[2])
    memory.MIN_BUDGET = 1
    with LayerCache.open(cache_path) as cache:
        # Warm up what the work loads (torch's kernels for these shapes, the solvers' first calls) on random
        # features of the cache's shape, then measure from here: the baseline is the interpreter and its libraries.
        rng = np.random.default_rng(0)
        X = rng.normal(size=(600, len(cache.layer_names), cache.hidden_size)).astype(np.float32)
        y = np.arange(600) % 2
        warm = LinearProbes(max_train=None, max_iter=30).fit_arrays(X, y)
        warm.score_arrays(X, y)
        CumulativeProbes(max_train=None, max_iter=5).fit_arrays(X, y, X, y)
        del X, warm
        cache.lengths("train"), cache.lengths("test")
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
        baseline = status("VmRSS")
        with memory.memory_limit(budget if budget else None):
            probes = LinearProbes(task="tags", max_train=500, max_iter=30).fit(cache)
            scores = probes.score(cache, "test")
            cum = CumulativeProbes(task="tags", max_train=500, max_iter=5).fit(cache, probes=probes)
            cumulative = cum.score(cache, "test")
        print(json.dumps({"baseline": baseline, "peak": status("VmHWM"), "scores": scores.tolist(),
                          "cumulative": cumulative.tolist()}))
""")


def wide_bert(folder: Path) -> Path:
    """A random BERT as wide as small real ones (6 layers, 7 states x 256) with the tiny models' tokenizer: the word
    features of a few thousand sentences take far more than the bookkeeping per word (positions, labels) does."""
    import torch
    import transformers
    from tiny_models import make_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(folder, encoder=True)
    config = transformers.BertConfig(vocab_size=len(tok), hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
                                     intermediate_size=512, max_position_embeddings=128)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def wide_token_cache(tmp_path_factory) -> Path:
    """A token-task cache whose word features take ~200 MB a split (7 states x 256, float32): several times the
    budget of the test."""
    import layercache

    folder = tmp_path_factory.mktemp("wide")
    rng = np.random.default_rng(0)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "far", "away", "home"]
    lines = []
    for _ in range(3000):
        for _ in range(10):
            lines.append(f"{words[rng.integers(len(words))]} {'BI'[rng.integers(2)]}")
        lines.append("")
    text = "\n".join(lines) + "\n"
    for split in ("train", "test"):
        (folder / f"{split}.txt").write_text(text, encoding="utf-8")
    out = folder / "cache"
    layercache.extract(str(wide_bert(folder / "model")), None, out, progress=False, shard_bytes=8 << 20,
                       split_files={s: str(folder / f"{s}.txt") for s in ("train", "test")})
    return out


def run_child(cache: Path, budget: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(cache), str(budget)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to measure peak memory")
def test_probes_peak_under_the_budget_on_a_cache_larger_than_it(wide_token_cache):
    """Linear probes (fitted, scored on a held-out split) and cumulative scoring: a peak under the budget."""
    budget = 64 << 20
    with_budget = run_child(wide_token_cache, budget)
    unlimited = run_child(wide_token_cache, 0)
    used, used_unlimited = (r["peak"] - r["baseline"] for r in (with_budget, unlimited))
    print(f"peak above the baseline: {used / 2**20:.1f} MiB under a {budget >> 20} MiB budget, "
          f"{used_unlimited / 2**20:.1f} MiB without one")
    # Measured: ~78 MiB under 64 MiB, ~280 MiB without a budget. The overshoot is not the features (half the
    # budget at most) but what grows with the words read (positions, labels, the row lists of each read) and
    # the allocator's slack; it is bounded here, not yet inside the budget itself.
    assert used <= 1.5 * budget, f"peaked {used / 2**20:.1f} MiB above the baseline under a {budget >> 20} MiB budget"
    assert used_unlimited > 3 * budget, "the cache is too small to show the budget (unlimited used " \
                                        f"{used_unlimited / 2**20:.1f} MiB)"
    assert with_budget["scores"] == unlimited["scores"]
    assert with_budget["cumulative"] == unlimited["cumulative"]


def test_word_states_gathered_from_the_memory_maps_are_the_streamed_ones(builtin_cache, monkeypatch):
    from layercache.probes import features

    spec = next(t for t in builtin_cache.tasks if t.kind == "token")
    index = list(range(len(builtin_cache.layer_names)))
    rows = [np.arange(builtin_cache.num_examples("train")), np.arange(0, builtin_cache.num_examples("train"), 3)]
    mapped = features._read_words(builtin_cache, "train", spec, index, rows, True, (50, 0))
    monkeypatch.setattr(builtin_cache, "mapped_states", lambda *args: None)  # no shard mapped: read through HDF5
    streamed = features._read_words(builtin_cache, "train", spec, index, rows, True, (50, 0))
    for a, b in zip(mapped, streamed):
        np.testing.assert_array_equal(a.X, b.X)
        np.testing.assert_array_equal(a.y, b.y)
        np.testing.assert_array_equal(a.rows, b.rows)
        assert a.types == b.types and a.n_available == b.n_available
    assert len(mapped[0].y) == 50 < mapped[0].n_available
