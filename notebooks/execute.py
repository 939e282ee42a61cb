"""Run the notebooks top to bottom in a real Jupyter kernel, as `make notebooks` and the test suite do.

    python notebooks/execute.py                      # every notebook here; executed copies in runs/notebooks/
    python notebooks/execute.py 02_heads_and_layer_weights.ipynb --out /tmp/executed

Each notebook runs in a fresh kernel of this interpreter (nbclient + ipykernel, in layercache's
``dev`` extra), from this folder, so its ``../runs/demo-cache`` is the one `make demo` writes (the
first cell extracts it when it is missing). The notebooks in git stay without outputs; the executed
copies, with every output and figure, are written beside the other run outputs. A cell that fails
stops its notebook: the cell's number, its first line and the error are printed, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "runs" / "notebooks"
CELL_TIMEOUT = 1800
"""Seconds one cell may run: the first cell extracts the demo cache when it is missing (about a minute on 2 cores)."""


def notebooks(names: Sequence[str] = ()) -> list[Path]:
    """The notebooks to run: those named (in this folder, or paths), else every ``*.ipynb`` here in order."""
    if not names:
        return sorted(HERE.glob("*.ipynb"))
    found = [Path(n) if Path(n).is_file() else HERE / n for n in names]
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise SystemExit(f"No such notebook: {', '.join(missing)}; the notebooks are in {HERE}.")
    return found


def execute(path: Path, *, before: Sequence[str] = (), after: Sequence[str] = (), cwd: Path = HERE,
            timeout: int = CELL_TIMEOUT, notebook=None):
    """Run the notebook at ``path`` (or ``notebook``, read from it) in a fresh ``python3`` kernel from ``cwd``, with
    the code cells ``before`` and ``after`` its own (set-up and checks of a test); returns the executed notebook,
    its outputs filled in place. A failing cell raises nbclient's ``CellExecutionError``, naming the error."""
    import nbformat
    from nbclient import NotebookClient

    if notebook is None:
        notebook = nbformat.read(path, as_version=4)
    notebook.cells = ([nbformat.v4.new_code_cell(code) for code in before] + notebook.cells
                      + [nbformat.v4.new_code_cell(code) for code in after])
    NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return notebook


def _failed_cell(notebook) -> str:
    """``cell N (first line)`` of the first cell whose output is an error."""
    for number, cell in enumerate((c for c in notebook.cells if c.cell_type == "code"), 1):
        if any(out.get("output_type") == "error" for out in cell.get("outputs", ())):
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            return f"code cell {number} ({first})"
    return "a cell"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the notebooks named in ``argv`` (default: all) and write the executed copies; 1 when one fails."""
    import nbformat
    from nbclient.exceptions import CellExecutionError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: every one in notebooks/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the executed copies")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in notebooks(args.notebooks):
        t0 = time.perf_counter()
        notebook = nbformat.read(path, as_version=4)
        try:
            execute(path, notebook=notebook)
        except CellExecutionError as err:
            failed += 1
            print(f"{path.name}: FAILED at {_failed_cell(notebook)}: {str(err).strip().splitlines()[-1]}",
                  file=sys.stderr)
        target = args.out / path.name
        nbformat.write(notebook, target)  # a failed one too: its outputs show what ran and the error
        if not failed:
            print(f"{path.name}: ran in {time.perf_counter() - t0:.0f} s -> {target}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
