"""Fixtures shared by the probe tests: one torch thread, and a tiny cache of the built-in task set."""

from __future__ import annotations

import pytest
from conftest import tiny_builtin_cache

import layercache


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""


@pytest.fixture(scope="package")
def builtin_cache(tiny_models, tmp_path_factory):
    """The built-in task set (sequence, token and regression tasks) through the tiny BERT."""
    out = tiny_builtin_cache(tiny_models, tmp_path_factory, "probes", limit=200)
    with layercache.LayerCache.open(out) as cache:
        yield cache
