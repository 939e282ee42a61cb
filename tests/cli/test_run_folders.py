"""`layercache train-head`'s run folders: Ctrl-C leaves nothing half-written and says so; ``train-head .`` inside
a cache and ``train-head ..`` from a split folder name the runs beside the cache (the library side: tests/heads)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/heads
CLI_QUICK = ("--mixer", "last", "--task", "sentiment", "-q")
RUN_FILES = {"config.json", "weights.safetensors", "metrics.json", "layer_weights.json", "layer_weights.png"}


def _visible(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def _interrupt_plot(monkeypatch):
    """Ctrl-C while the run's last file is written (weights and config are staged by then)."""
    import layercache.heads.workflow as runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "plot_layer_weights", interrupted)


def test_ctrl_c_during_train_head_keeps_nothing_and_says_so(cache, tmp_path, monkeypatch):
    out = tmp_path / "run"
    runs_beside = cache.parent / "cache.runs"
    before = _visible(runs_beside)
    with monkeypatch.context() as patched:
        _interrupt_plot(patched)
        for args in (("--out", out), ()):
            result = invoke("train-head", cache, *CLI_QUICK, *args)
            assert result.exit_code == 130, result.output
            text = " ".join(result.output.split())
            assert "shards" not in text and "nothing of it was written" in text, text
            assert "run the same command again" in text
    assert not out.exists() and _visible(runs_beside) == before  # no folder, not even an empty one
    again = invoke("train-head", cache, *CLI_QUICK, "--out", out)  # the same command runs again
    assert again.exit_code == 0, again.output
    assert _visible(out) == RUN_FILES


@pytest.mark.parametrize("where, given", [(".", "."), ("train", "..")])
def test_relative_cache_paths_name_the_runs_beside_the_cache(cache, monkeypatch, where, given):
    monkeypatch.chdir(cache / where if where != "." else cache)
    result = invoke("train-head", given, *CLI_QUICK)
    assert result.exit_code == 0, result.output
    assert not (cache / ".runs").exists() and not (cache / "train" / "...runs").exists()
    assert not any(p.name.endswith(".runs") for p in cache.rglob("*"))
    assert f"Run written: {cache.parent / 'cache.runs'}" in " ".join(result.output.split())


@pytest.mark.parametrize("where, given", [(".", "."), ("train", "..")])
def test_runs_written_from_inside_a_cache_are_found_from_there_too(cache, monkeypatch, where, given):
    """train-head wrote ``<cache>.runs`` for ``.`` while the report's search looked in ``./.runs``: one rule now."""
    from layercache import LayerCache
    from layercache.heads.run_folders.run_files import find_runs

    monkeypatch.chdir(cache / where if where != "." else cache)
    result = invoke("train-head", given, *CLI_QUICK)
    assert result.exit_code == 0, result.output
    with LayerCache.open(given) as opened:
        found = find_runs(opened)
    assert [p.resolve() for p in found] == sorted((cache.parent / "cache.runs").iterdir())


def test_ctrl_c_before_a_run_folder_is_claimed_speaks_of_no_shards(cache, monkeypatch):
    """Ctrl-C while the cache opens, before train-head claims its folder: the extraction's words ("committed shards
    are kept") were printed for a command that writes no shard."""
    import layercache.heads.workflow as runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "using_cache", interrupted)
    result = invoke("train-head", cache, *CLI_QUICK)
    assert result.exit_code == 130, result.output
    text = " ".join(result.output.split())
    assert "shards" not in text and "Interrupted before anything was written" in text, text
