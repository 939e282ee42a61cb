"""``layercache list``: says where it looked, how to list another folder, and names every column."""

from __future__ import annotations

import pytest
from cli_support import assert_refused, invoke


@pytest.fixture(scope="module")
def demo(tiny_models, tmp_path_factory):
    """A cache extracted with --out under runs/ (as make demo does), recorded as the most recent one."""
    import layercache as lc

    runs = tmp_path_factory.mktemp("checkout") / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(runs.parent / "home"))
        path = lc.extract(str(tiny_models["bert"]), "builtin", runs / "demo-cache", limit=8, progress=False).path
    return path


def said(result) -> str:
    return " ".join(result.output.replace("│", " ").split())


def test_an_empty_home_says_where_it_looked_and_how_to_list_another_folder(isolated_home):
    result = invoke("list")
    assert result.exit_code == 0, result.output
    text = said(result)
    assert f"No caches in {isolated_home}" in text and "$LAYERCACHE_HOME" in text
    assert "layercache list FOLDER" in text


def test_the_latest_cache_elsewhere_is_pointed_to(demo, isolated_home, monkeypatch):
    from layercache.store.paths import record_latest

    record_latest(demo)
    text = said(invoke("list"))
    assert f"No caches in {isolated_home}" in text
    assert f"the most recent cache is {demo}" in text and f"layercache list {demo.parent}" in text


def test_list_a_folder(demo):
    from layercache.store.paths import record_latest

    record_latest(demo)
    result = invoke("list", demo.parent)
    assert result.exit_code == 0, result.output
    text = said(result)
    assert f"Caches in {demo.parent}" in text
    for header in ("latest", "cache", "model", "dataset", "splits", "status"):
        assert header in text
    assert "yes demo-cache" in text and "complete" in text
    one = said(invoke("list", demo))  # a cache folder itself
    assert "demo-cache" in one and "complete" in one


def test_list_a_folder_that_is_not_one(tmp_path):
    assert_refused(invoke("list", tmp_path / "missing"), "is not a folder", "layercache list")
    (tmp_path / "file").write_text("x")
    assert_refused(invoke("list", tmp_path / "file"), "is not a folder")
