"""``layercache plan`` (cli/plan.py): every storage choice printed with its measured inputs and a recommendation;
the plan as JSON; bad input refused in one sentence; no cache written (issue 28)."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

from layercache.cli import base
from layercache.extraction import measure, pricing

CHOICES = ["tokens float16", "tokens bfloat16", "tokens int8", "tokens int8 + project 16", "tokens int8 + project 8",
           "tokens int8 + project 4", "tokens int4", "tokens int4 + project 16", "tokens int4 + project 8",
           "tokens int4 + project 4", "pooled float16", "no cache"]
"""Every row for the tiny BERT (32 wide: projections to 16, 8 and 4)."""


@pytest.fixture(autouse=True)
def small_disk_probe(monkeypatch):
    """A 1 MiB disk probe instead of 256 MiB, and a console wide enough for the table in one piece."""
    original = measure.disk_speed
    monkeypatch.setattr(pricing, "disk_speed", lambda folder, probe_bytes: original(folder, 2**20))
    from rich.console import Console

    monkeypatch.setattr(base, "out_console", Console(width=200, force_terminal=False))


def test_plan_prints_every_choice_and_writes_no_cache(tiny_models, tsv, tmp_path, capsys):
    out = tmp_path / "cache"
    saved = tmp_path / "plan.json"
    result = invoke("plan", tiny_models["bert"], tsv, "--out", out, "--sample-batches", "1", "--json", saved,
                    "--project", "12")
    assert result.exit_code == 0, result.output
    text = result.output + capsys.readouterr().out
    for name in [*CHOICES, "tokens int8 + project 12 *"]:
        assert name in text, name
    for what in ("tokens/s", "MB/s cold", "free", "available", "Recommended:"):
        assert what in text, what
    assert not out.exists() and not list(tmp_path.glob(".layercache-disk-probe-*"))
    plan = json.loads(saved.read_text())
    assert plan["yours"] == "tokens int8 + project 12"  # --project selects the user's row
    assert [c["name"] for c in plan["choices"]] == [*CHOICES[:4], "tokens int8 + project 12", *CHOICES[4:8],
                                                    "tokens int4 + project 12", *CHOICES[8:]]
    assert plan["forward"]["tokens_per_second"] > 0 and plan["disk"]["read_bytes_per_second"] > 0


@pytest.mark.parametrize("options, fragment", [
    (["--project", "0"], "--project must be at least 1"),
    (["--project", "32"], "--project 32 must lie between 1 and 31"),
    (["--store", "everything"], "--store 'everything' is not known"),
    (["--disk-budget", "lots"], "is not understood"),
    (["--sample-batches", "-1"], "--sample-batches must be 0 or more"),
])
def test_bad_options_are_refused_in_one_sentence(tiny_models, tsv, tmp_path, options, fragment):
    assert_refused(invoke("plan", tiny_models["bert"], tsv, "--out", tmp_path / "cache", *options), fragment)
