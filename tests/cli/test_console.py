"""What the console shows: no progress residue in a pipe, tables readable at 80 columns, flags without a value type."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from cli_support import assert_refused, invoke
from conftest import tiny_builtin_cache
from console_support import assert_readable, narrow
from typer.testing import CliRunner

from layercache.cli import app

RESIDUE = re.compile(r"━+ +\d+/\d+")  # a bar's last frame: ``epoch 2/2 ━━━━━━ 4/4 loss 0.7031 ...``


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """torch on one thread (see the root conftest)."""


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    """The built-in tasks through the tiny BERT, 24 examples per split."""
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "console-cache", limit=24)


# ---------------------------------------------------------------- progress in a pipe
def test_no_progress_residue_when_stdout_and_stderr_are_pipes(cache, tiny_models, tsv, tmp_path):
    """CliRunner's streams are not terminals: no bar, no last frame cut to 80 columns (ep… lo… val …)."""
    trained = invoke("train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "2", "--out",
                     tmp_path / "run", "--threads", "1")
    assert trained.exit_code == 0, trained.output
    extracted = invoke("extract", tiny_models["bert"], tsv, "--out", tmp_path / "cache", "--threads", "1")
    assert extracted.exit_code == 0, extracted.output
    for result in (trained, extracted):
        assert not RESIDUE.search(result.output), result.output
        assert "…" not in result.output, result.output
    assert "Run written" in trained.output and "Cache written" in extracted.output


PLAIN = re.compile(r"(?P<what>training epoch \d+/2|extracting \w+): (?P<count>(step )?\d+/\d+( examples)?) \(\d+%\), "
                   r"(\d+:\d\d elapsed, (\d+:\d\d|\?) left|done in \d+:\d\d)(; .+)?")


def test_a_pipe_gets_plain_progress_lines_with_what_how_far_and_the_times(cache, tiny_models, tsv, tmp_path,
                                                                          monkeypatch):
    """In a pipe or a log, every LAYERCACHE_PROGRESS_INTERVAL seconds (here: at every update) one plain line."""
    monkeypatch.setenv("LAYERCACHE_PROGRESS_INTERVAL", "0")
    trained = invoke("train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "2", "--out",
                     tmp_path / "run", "--threads", "1")
    extracted = invoke("extract", tiny_models["bert"], tsv, "--out", tmp_path / "cache", "--threads", "1")
    for result, what in ((trained, "training epoch"), (extracted, "extracting train")):
        assert result.exit_code == 0, result.output
        lines = [line for line in result.output.splitlines() if line.startswith(what)]
        assert lines and all(PLAIN.fullmatch(line) for line in lines), result.output
        assert "done in" in lines[-1] and not RESIDUE.search(result.output)
    assert any("validation after epoch 1: sentiment accuracy" in line for line in trained.output.splitlines())
    quiet = invoke("train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "1", "--out",
                   tmp_path / "quiet", "--threads", "1", "--quiet")
    assert quiet.exit_code == 0 and "training epoch" not in quiet.output, quiet.output


def test_a_malformed_progress_interval_is_refused_before_any_work(tiny_models, tsv, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCACHE_PROGRESS_INTERVAL", "soon")
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", tmp_path / "cache", "--threads", "1"),
                   "LAYERCACHE_PROGRESS_INTERVAL must be the seconds between progress lines", "got 'soon'")
    assert not (tmp_path / "cache").exists()


def test_a_bar_is_drawn_in_a_terminal_only(monkeypatch):
    from layercache import progress

    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: treat the stream as a terminal
    assert not progress.progress_bar(enabled=True).disable
    assert progress.progress_bar(enabled=False).disable
    monkeypatch.setenv("TERM", "dumb")  # a terminal that cannot redraw a line
    assert progress.progress_bar(enabled=True).disable
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert progress.progress_bar(enabled=True).disable


def test_every_progress_bar_is_made_by_the_progress_module():
    """A Progress built elsewhere would not follow the terminal rule."""
    from pathlib import Path

    import layercache

    root = Path(layercache.__file__).parent
    makers = [str(p.relative_to(root)) for p in root.rglob("*.py")
              if re.search(r"\bProgress\(", p.read_text()) and p.name != "progress.py"]
    assert makers == []


# ---------------------------------------------------------------- tables at 80 columns
def probe_report(n_layers: int = 13) -> SimpleNamespace:
    """What render_probe_summary reads, for a 12-layer model and four tasks."""
    names = ["embeddings", *(f"layer_{i}" for i in range(1, n_layers))]
    tasks = {}
    for k, (task, kind, metric) in enumerate([("sentiment", "sequence", "accuracy"),
                                              ("negation_scope", "token", "span_f1"),
                                              ("intensity", "regression", "pearson"), ("topic", "sequence", "mcc")]):
        best = n_layers - 2 - k
        scores = [0.5 + 0.03 * i for i in range(n_layers)]
        tasks[task] = {"kind": kind, "metric": metric, "probe": {"best_index": best, "best_layer": names[best],
                                                                 "eval": scores, "validation": scores},
                       "control": {"selectivity": [0.1 + 0.01 * i for i in range(n_layers)]},
                       "mdl": {"best_layer": names[best - 1], "compression": [1.0, 2.25]},
                       "cumulative": {"expected_layer": 4.21, "expected_layer_of_mix": 3.9},
                       "prediction_depth": {"mean": 2.1}}
    return SimpleNamespace(layer_names=names, tasks=tasks, meta={"eval_split": "test"}, token_depth=None,
                           logit_lens=None, lenses=None, notes=[])


def test_probe_summary_keeps_every_layer_name_and_score_at_80_columns():
    from layercache.report.summary import render_probe_summary

    console = narrow()
    report = probe_report()
    render_probe_summary(report, console)
    text = console.export_text()
    assert_readable(text)
    for task, t in report.tasks.items():
        assert re.search(rf"{task} +│ +\w+ +│ +{t['probe']['best_layer']} ", text), text  # the best layer, whole
        assert t["mdl"]["best_layer"] + " (2.25)" in text
    for header in ("best layer", "selectivity", "E_Δ", "prediction", "depth"):
        assert header in text, header
    for value in ("0.860", "0.830", "0.220"):  # the last layers' scores and selectivities are all there
        assert value in text


def test_info_headers_whole_at_80_columns(cache):
    from layercache.report.info import cache_summary, render_summary
    from layercache.store.reader import LayerCache

    with LayerCache.open(cache) as handle:
        summary = cache_summary(handle)
    summary["splits"]["train"].update(truncated=3, skipped_empty=1, windowed=2)  # every count column shown
    console = narrow()
    render_summary(summary, console)
    text = console.export_text()
    assert_readable(text)
    for header in ("split", "examples", "tokens", "truncated", "skipped", "windowed", "shards", "size", "complete"):
        assert re.search(rf"\b{header}\b", text), header
    result = invoke("info", cache)  # the command, in a pipe: 80 columns
    assert result.exit_code == 0, result.output
    assert_readable(result.output)
    assert "No example truncated, skipped (empty text) or windowed in any split." in result.output


def test_a_wide_table_is_split_and_repeats_its_key_columns():
    from layercache.report.tables import Column, fitted_tables, print_fitted

    columns = [Column("task", key=True), *(Column(f"a long header {i}", justify="right") for i in range(10))]
    rows = [["sentiment", *(f"{i}.123456" for i in range(10))], ["negation_scope", *("1.0" for _ in range(10))]]
    tables = fitted_tables(columns, rows, 80, title="scores", caption="a caption")
    assert len(tables) > 1
    console = narrow()
    print_fitted(console, columns, rows, title="scores", caption="a caption")
    text = console.export_text()
    assert_readable(text)
    assert text.count("negation_scope") == len(tables) and text.count("a caption") == 1
    for i in range(10):
        assert f"{i}.123456" in text
    wide = narrow(400)
    print_fitted(wide, columns, rows)
    text = wide.export_text()
    assert "a long header 9" in text and text.count("sentiment") == 1


def test_a_prose_column_wraps_instead_of_being_cut():
    from layercache.report.tables import Column, print_fitted

    columns = [Column("cache", key=True), Column("status", wrap=True)]
    reason = "broken: shard train/shard-00000.h5 is missing, and so is everything that came after it " * 2
    console = narrow()
    print_fitted(console, columns, [["demo", reason]])
    text = " ".join(console.export_text().split())
    assert "…" not in text and "shard-00000.h5" in text


# ---------------------------------------------------------------- --help
COMMANDS = ["extract", "info", "list", "train-head", "eval", "sweep", "probe-report", "predict", "verify"]


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=["app", *COMMANDS])
def test_help_shows_no_value_type_after_a_flag(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert re.search(r"--help +Show this message", result.output)
    assert all(len(line) <= 80 for line in result.output.splitlines())
