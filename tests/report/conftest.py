"""A probing report of a tiny cache of the built-in task set, built once for the report tests."""

from __future__ import annotations

import pytest
from conftest import tiny_builtin_cache

from layercache.report.probing import probe_report


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""


@pytest.fixture(scope="package")
def report_cache(tiny_models, tmp_path_factory):
    """The built-in task set (sequence, token and regression tasks) through the tiny BERT, 300 examples."""
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "report", limit=300)


@pytest.fixture(scope="package")
def built_report(report_cache):
    """(report, paths) of ``probe_report`` on that cache, with a short act head trained for token depth."""
    return probe_report(report_cache, report_cache.parent / "report", act_epochs=2, progress=False)
