"""What a live command reads or owns, so that its output never lands there (``predict --out``).

A file layercache writes for the user (predictions) must never replace one that a run, a cache or a
backbone of the same command holds: ``--out MODEL/model.safetensors`` once replaced the backbone's
weights with JSON lines, and ``--out RUN/metrics.json`` a run's own file. So the places are folders,
not a list of file names:

- each run folder, whatever files it holds (config, weights, metrics, figures, a checkpoint), and the
  sweep folder (``sweep.json``) a run lies in;
- the backbone's folder: a local model folder (or a bundled model's installed folder), or, for a hub
  id, its folder in the local Hugging Face cache, which holds the snapshot the id resolves to
  (:func:`~layercache.backbone.location.model_folders`), whether or not it was downloaded yet;
- the cache folder each run records it was trained on.

The input file is compared by :func:`~.outputs.check_output_file` itself, with every file the command
reads.

:func:`refuse_guarded` refuses a path inside one of them once the links of its folders are resolved
(a link to a model folder is that folder), and an existing file that is the same file (device and
inode: a hard link, or a file a guarded folder links to) as one there. Nothing is loaded to find them:
the runs' configs name the backbone and the cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backbone.location import model_folders
from ..core.option_names import option
from ..errors import ConfigError
from ..heads.run_folders.run_files import RunConfig
from ..heads.run_folders.run_folder import SWEEP_FILE


@dataclass(frozen=True)
class Guarded:
    """A folder that a command's output must never be in (nor be, nor be the same file as one below it)."""

    path: Path
    """Absolute, its links resolved."""
    what: str
    """How a refusal names it: ``the run folder runs/a``."""


def predict_places(runs: Sequence[str | os.PathLike], backbone: str | None = None) -> list[Guarded]:
    """The folders ``predict`` reads or owns: its runs (and their sweep folders), the backbone and the runs' caches;
    ``backbone``: the one asked for (default: each run's recorded one)."""
    places = []
    models = [backbone] if backbone else []
    for run in runs:
        places.append(_place(run, f"the run folder {run}"))
        parent = Path(run).parent
        if (parent / SWEEP_FILE).is_file():
            places.append(_place(parent, f"the sweep folder {parent}"))
        config = RunConfig.peek(run)
        if config is None:
            continue
        cache = config.data.cache if config.data is not None else None
        if isinstance(cache, str) and cache:
            places.append(_place(cache, f"the cache folder {cache} the run {run} was trained on"))
        if not backbone and isinstance(config.cache.model, str) and config.cache.model:
            models.append(config.cache.model)
    for model in dict.fromkeys(models):
        for folder in model_folders(model):
            label = str(folder) if folder == Path(model).expanduser().resolve() else f"{model!r} ({folder})"
            places.append(Guarded(folder, f"the folder of the backbone {label}"))
    return places


def refuse_guarded(target: Path, given: str | os.PathLike, places: Iterable[Guarded], keyword: str = "out") -> None:
    """Refuse ``target`` (as the user ``given`` it, as the option ``keyword``) in one sentence when it lies in or is
    one of ``places``."""
    places = list(places)
    where = _real(target)
    for place in places:
        if where == place.path or place.path in where.parents:
            what = "is" if where == place.path else "is inside"
            raise ConfigError(f"{option(keyword, given)} {what} {place.what}, which this command reads or owns: "
                              f"writing the output there could destroy a file it needs; choose an {option(keyword)} "
                              "outside it.")
    same = _same_file(target, places)
    if same is not None:
        file, place = same
        raise ConfigError(f"{option(keyword, given)} is the same file as {file}, in {place.what}, which this command "
                          f"reads or owns: writing the output there would destroy it; choose another {option(keyword)} "
                          "file.")


def _place(path: str | os.PathLike, what: str) -> Guarded:
    return Guarded(_real(Path(path).expanduser()), what)


def _real(path: Path) -> Path:
    """``path`` absolute with every link above it resolved (the name itself kept: a link there is the output's)."""
    return Path(os.path.realpath(path.parent)) / path.name


def _same_file(target: Path, places: list[Guarded]) -> tuple[Path, Guarded] | None:
    """(file, place) of a file in ``places`` that is ``target`` itself (device and inode), or None.

    Only an existing file can be one; the folders are walked without following their links, and each file
    (a link followed to what it names) is compared.
    """
    try:
        st = os.stat(target)
    except (OSError, ValueError):
        return None
    mine = (st.st_dev, st.st_ino)
    for place in places:
        for file in _files(place.path):
            try:
                other = os.stat(file)
            except (OSError, ValueError):
                continue
            if (other.st_dev, other.st_ino) == mine:
                return file, place
    return None


def _files(top: Path) -> Iterable[Path]:
    """Every entry below ``top``, links as entries (never descended)."""
    for folder, dirs, files in os.walk(top, followlinks=False):
        for name in (*files, *dirs):  # a link to a file is listed with the folders when it names one
            yield Path(folder, name)
