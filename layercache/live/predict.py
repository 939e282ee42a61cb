"""``predict_texts``: the library call behind ``layercache predict``, runs and texts in, predictions out."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import ConfigError
from .bundle import LiveBundle
from .inputs import Input
from .results import BundlePredictions


def is_run_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder `layercache train-head` wrote (it has config.json and weights)."""
    folder = Path(path)
    return (folder / "config.json").is_file() and (folder / "weights.safetensors").is_file()


def split_runs(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``RUN [RUN ...] TEXT ...`` -> (runs, texts): the leading arguments that are run folders, then the rest."""
    n = 0
    while n < len(args) and is_run_folder(args[n]):
        n += 1
    if n == 0:
        first = args[0] if args else None
        where = f"{first!r} is not a run folder" if first else "no run folder was given"
        raise ConfigError(f"Nothing to predict with: {where}; start with the run folders `layercache train-head` "
                          "wrote, then the texts.")
    return list(args[:n]), list(args[n:])


def predict_texts(runs: Sequence[str | os.PathLike], texts: Sequence[Input], *, backbone: str | None = None,
                  device: str = "auto", batch_size: int = 32, progress: bool = False) -> BundlePredictions:
    """Load ``runs`` with their backbone (or ``backbone``) and predict ``texts``, batched by length.

    ``progress``: a bar on stderr, advanced as each batch finishes.
    """
    if not texts:
        raise ConfigError("Nothing to predict: give texts after the run folders, or --file with one text per line.")
    bundle = LiveBundle.from_runs(runs, backbone, device=device)
    bar = Progress(TextColumn("[bold]predicting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(file=sys.stderr), disable=not progress, transient=True)
    with bar:
        task = bar.add_task("predict", total=len(texts))
        return bundle.predict(texts, batch_size=batch_size, progress=lambda n: bar.advance(task, n))
