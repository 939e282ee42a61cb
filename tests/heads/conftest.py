"""Fixtures for the head tests."""

from __future__ import annotations

import pytest
from conftest import tiny_builtin_cache

import layercache as lc


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""


@pytest.fixture(scope="module")
def planted_path(request, tiny_models, tmp_path_factory):
    """A module's planted cache: the built-in task set through the tiny BERT, ``PLANTED = (name, limit)``
    of the module, with the module's ``plant(path)`` applied to it."""
    name, limit = request.module.PLANTED
    path = tiny_builtin_cache(tiny_models, tmp_path_factory, name, limit)
    request.module.plant(path)
    return path


@pytest.fixture(scope="module")
def planted(planted_path):
    """The module's planted cache, open."""
    with lc.LayerCache.open(planted_path) as cache:
        yield cache
