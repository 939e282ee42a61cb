"""Fixtures for the head tests."""

from __future__ import annotations

import logging

import pytest

import layercache as lc
from layercache.heads import train_head


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""


@pytest.fixture(scope="module")
def planted(planted_path):
    """The module's planted cache, open."""
    with lc.LayerCache.open(planted_path) as cache:
        yield cache


@pytest.fixture(scope="module")
def good_run(cache, tmp_path_factory):
    """A one-epoch ``last`` run on the module's small ``cache`` (see the root conftest)."""
    return train_head(cache, "last", out=tmp_path_factory.mktemp("good") / "run", tasks=["sentiment"], epochs=1,
                      progress=False, device="cpu").run


@pytest.fixture
def logged(caplog):
    """caplog with layercache's own log records at INFO and above (the CLI's handler, once set up in the process,
    stops them from reaching the root logger, where caplog listens)."""
    logger = logging.getLogger("layercache")
    level = logger.level
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.INFO)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.setLevel(level)
