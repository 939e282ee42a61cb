"""What the benchmark scripts share: set-up, quiet library logging, load averages, plain-text tables.

Importing it sets the environment before transformers loads (no hub progress bars, no warnings,
no tokenizer threads competing with torch) and puts the repository first on ``sys.path``, so a
script runs from a checkout without installing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
"""The shared data folder beside the repository (``--data`` points elsewhere)."""
if importlib.util.find_spec("layercache") is None and str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # an uninstalled checkout; an installed layercache (compare.py's REV) is kept


def quiet_transformers() -> None:
    """Silence transformers' progress bars and warnings: benchmark output is tables."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:  # pragma: no cover - only cosmetics
        pass


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, recorded beside timings (None where unknown)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def fmt(x, digits: int = 2) -> str:
    """A table cell: thousands separators, ``digits`` decimals below 100, one up to 1000, none above."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x != x:
            return "nan"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        if abs(x) >= 100:
            return f"{x:.1f}"
        return f"{x:.{digits}f}"
    return str(x)


def print_table(title: str, headers: list[str], rows: list[list], note: str | None = None,
                digits: int = 2) -> None:
    """Print ``rows`` under ``headers``, first column left-aligned, the rest right-aligned, then ``note``."""
    cells = [[fmt(c, digits) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    if note:
        for text in note.strip().splitlines():
            print(f"  {text}")
    sys.stdout.flush()


@contextlib.contextmanager
def work_folder(chosen: Path | None, prefix: str) -> Iterator[Path]:
    """The folder for the run's caches: ``chosen`` (kept), or a temporary one removed afterwards.

    ``extract()`` records what it writes as the user's "latest" cache; ``LAYERCACHE_HOME`` is
    pointed inside this folder so a benchmark never changes that pointer.
    """
    context = contextlib.nullcontext(str(chosen)) if chosen else tempfile.TemporaryDirectory(prefix=prefix)
    with context as folder:
        workdir = Path(folder)
        workdir.mkdir(parents=True, exist_ok=True)
        os.environ["LAYERCACHE_HOME"] = str(workdir / "home")
        yield workdir


def commit(where: Path | None = None) -> str | None:
    """The commit of the checkout at ``where`` (default: the one layercache is imported from), ``+dirty`` when
    tracked files differ from it; None outside a git checkout."""
    import subprocess

    if where is None:
        spec = importlib.util.find_spec("layercache")
        where = Path(spec.origin).resolve().parents[1] if spec and spec.origin else REPO
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def cpu_model() -> str | None:
    """The CPU's model name (Linux: /proc/cpuinfo; else what platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_meta(quick: bool, model: str, device: str) -> dict:
    """What a result file records about the run and the machine (imports torch and layercache)."""
    import torch

    import layercache

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit(), "cpu": cpu_model(),
            "quick": quick, "model": model, "device": device,
            "python": platform.python_version(), "torch": torch.__version__, "layercache": layercache.__version__,
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "loadavg_start": loadavg()}


def write_results(results: dict, out_json: Path) -> None:
    """Write the results as JSON (making the folder) and say where, with the run's total time. ``compare.py``
    sends them elsewhere (``LAYERCACHE_BENCH_JSON``)."""
    out_json = Path(os.environ.get("LAYERCACHE_BENCH_JSON", out_json))
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nTotal {results['meta']['total_s']:.0f}s. JSON written to {out_json}")


def weights_digest(head) -> str:
    """sha256 of a fitted head's weights (every tensor of its model, by name): equal digests, equal weights."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(head.model_.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
