"""Fixtures for the report tests; the probing report they read (report_cache, built_report) is built once by the
root conftest, shared with the probe-report command's tests in tests/cli."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""
