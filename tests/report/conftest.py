"""Fixtures for the report tests: the demo cache's report.json (``data/demo_report.json``) that the HTML and figure
tests read; the probing report they build (report_cache, built_report) is built once by the root conftest, shared
with the probe-report command's tests in tests/cli."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DEMO = Path(__file__).with_name("data") / "demo_report.json"


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""


@pytest.fixture
def demo() -> dict:
    """The demo cache's report.json (written by ``layercache probe-report runs/demo-cache``), as plain JSON data."""
    return json.loads(DEMO.read_text())
