"""Fixtures of the comparison's tests: the caches it compares (tests/compare_support.py), built once, and one
comparison of five of them (encoder and decoders, 2 and 3 layers, two tokenizers, float16, int8 and projected)."""

from __future__ import annotations

import pytest
from compare_support import comparison_caches

COMPARED = ("bert", "llama", "llama-bpe", "int8", "projected")


@pytest.fixture(scope="session")
def caches(tiny_models, tmp_path_factory):
    """name -> cache folder (see tests/compare_support.py)."""
    return comparison_caches(tiny_models, tmp_path_factory.mktemp("compare"))


@pytest.fixture(scope="session")
def compared(caches):
    """The comparison of :data:`COMPARED`, every task, the default options."""
    from layercache.report.compare import compare_caches

    return compare_caches([caches[name] for name in COMPARED], progress=False)
