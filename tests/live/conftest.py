"""Fixtures for the live bundle tests; their caches and runs (records, live_caches, runs) are the root conftest's,
shared with the tests of the live commands in tests/cli."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""
