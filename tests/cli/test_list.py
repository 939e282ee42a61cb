"""``layercache list``: says where it looked, how to list another folder, and names every column."""

from __future__ import annotations

import re

import pytest
from cli_support import assert_refused, invoke
from rich.console import Console


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


def test_list_shows_a_broken_cache_as_broken(tiny_models, tsv, isolated_home, monkeypatch):
    monkeypatch.setattr("layercache.cli.base.out_console", Console(width=250))
    small = ("--batch-size", "2", "--shard-size", "1", "--quiet")  # every batch its own shard
    for name in ("good", "bad", "lost"):
        assert invoke("extract", tiny_models["bert"], tsv, "--out", isolated_home / name, *small).exit_code == 0
    (isolated_home / "bad" / "manifest.json").write_bytes(b"\x00junk")
    next((isolated_home / "lost").glob("train/shard-*.h5")).unlink()
    (isolated_home / "latest").write_bytes(b"\xff\xfe")
    listing = invoke("list")
    assert listing.exit_code == 0 and "Traceback" not in listing.output, listing.output
    rows = {name: [line for line in listing.output.splitlines() if re.search(rf"│\s*{name}\s*│", line)]
            for name in ("good", "bad", "lost")}
    assert all(len(found) == 1 for found in rows.values()), listing.output
    rows = {name: found[0] for name, found in rows.items()}
    assert "complete" in rows["good"] and "broken:" not in rows["good"]
    assert "broken: The manifest" in rows["bad"] and "cannot be read" in rows["bad"]
    assert "broken: shard train/shard-" in rows["lost"] and "missing" in rows["lost"]
    assert "latest-cache pointer" in " ".join(listing.output.split())
