"""Fixtures for the solver tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""
