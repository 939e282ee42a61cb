"""The caches a comparison's tests compare: the built-in task set through several tiny random models, and the
tiny BERT's cache stored other ways. A package's tests (tests/report) and its command's (tests/cli) use the same.

- ``bert``: encoder, 2 layers of width 32, float16 token states and pooled means (WordPiece tokenizer);
- ``llama``: decoder, 3 layers (the same WordPiece words, no [CLS]/[SEP]);
- ``llama-bpe``: decoder, 2 layers, its own byte-level BPE tokenizer, so its rows come in another order;
- ``int8``, ``projected`` (K = 8 of 32 dimensions) and ``pooled`` (pooled means only): the tiny BERT's states
  stored three more ways;
- ``fewer``: the tiny BERT on fewer examples per split (a comparison refuses it beside the others).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_models import make_model

LIMIT = 60
"""Examples per split of every cache but ``fewer``."""
KINDS = {"bert": ("bert", {}), "llama": ("llama", {}), "llama-bpe": ("llama-bpe", {}),
         "int8": ("bert", {"storage_dtype": "int8"}), "projected": ("bert", {"project": 8}),
         "pooled": ("bert", {"store": "pooled"}), "fewer": ("bert", {"limit": 40})}


def comparison_caches(tiny_models: dict[str, Path], root: Path, names=tuple(KINDS)) -> dict[str, Path]:
    """name -> a cache folder under ``root`` for each of ``names`` (default: every entry of :data:`KINDS`)."""
    import layercache as lc

    models = dict(tiny_models)
    if "llama-bpe" in names:
        models["llama-bpe"] = make_model(root / "models" / "llama-bpe", "llama-bpe")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        for name in names:
            kind, options = KINDS[name]
            options = {"limit": LIMIT, **options}
            out[name] = lc.extract(str(models[kind]), "builtin", root / name, progress=False, **options).path
    return out
