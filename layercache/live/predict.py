"""``predict_texts``: the library call behind ``layercache predict``, runs and texts in, predictions out.

**Which argument is a run and which a text.** ``layercache predict RUN [RUN ...] TEXT ...`` takes run
folders first: the leading arguments that are run folders (a folder with ``config.json`` and
``weights.safetensors``) are the runs, and the first that is not starts the texts. A mistyped run
folder must not become a text, so every other argument that *looks like a path* is refused in one
sentence saying what it is (missing, a cache folder, a file, a run folder after the texts) and how
to pass it as text. An argument looks like a path when it contains a path separator or names
something that exists on disk. ``--text`` (repeatable) and anything after ``--`` are always texts,
so ``and/or`` or a word that happens to name a file in the working folder can still be predicted.

A text is never stat-ed when no file could have its name (a component longer than 255 bytes, a
whole longer than 4096, a NUL byte), and any other ``OSError`` of the look-up means "not on disk":
a long text is a text, not "File name too long".
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.confine import NAME_MAX, kind_of
from ..core.devices import check_max_memory
from ..core.option_names import command_line, flag, option
from ..core.threads import computes
from ..errors import ConfigError
from ..heads.run_folders.run_folder import CONFIG_FILE, WEIGHTS_FILE
from ..progress import counting_progress
from .bundle import LiveBundle, run_names
from .guarded import predict_places
from .inputs import Input, read_input_lines
from .outputs import check_output_file, write_lines
from .results import BundlePredictions

PATH_MAX = 4096
"""Longest path, in bytes, Linux resolves; a longer argument is a text without asking the disk."""
RUN_FILES = (CONFIG_FILE, WEIGHTS_FILE)


def _lstat(arg: str | os.PathLike) -> os.stat_result | None:
    """``os.lstat(arg)``, or None when nothing is there or ``arg`` cannot name a file (never raises)."""
    name = os.fsencode(arg)
    if not name or b"\0" in name or len(name) > PATH_MAX or any(len(part) > NAME_MAX for part in name.split(b"/")):
        return None
    try:
        return os.lstat(name)
    except (OSError, ValueError):
        return None


def is_run_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder `layercache train-head` wrote (it has config.json and weights); never raises."""
    if _lstat(path) is None:
        return False
    try:
        return all(Path(path, name).is_file() for name in RUN_FILES)
    except OSError:  # a loop of links, no permission to look
        return False


def looks_like_path(arg: str) -> bool:
    """Whether ``arg`` contains a path separator or names something on disk (see the module docstring)."""
    return any(sep and sep in arg for sep in ("/", os.sep, os.altsep)) or _lstat(arg) is not None


def path_argument_problem(arg: str) -> str | None:
    """Why ``arg``, given where a text is expected, is refused (it looks like a path); None for a text."""
    if not looks_like_path(arg):
        return None
    quoted = shlex.quote(arg)
    as_text = f"to predict it as a text, pass {flag('text', quoted)} or put it after `--`"  # predict's arguments
    if is_run_folder(arg):
        return (f"{arg} is a run folder given after the first text; put every run folder before the texts "
                f"(or, {as_text}).")
    st = _lstat(arg)
    if st is None:
        return (f"{arg} looks like a path (it contains a path separator) but nothing is there, so it is not a run "
                f"folder; check the run folder's name, or {as_text}.")
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(arg)
        except OSError:
            return f"{arg} is a broken symbolic link, not a run folder; fix the link, or {as_text}."
    if stat.S_ISDIR(st.st_mode):
        if _lstat(os.path.join(arg, "manifest.json")) is not None:
            return (f"{arg} is a cache folder, not a run folder: train a head on it (`layercache train-head "
                    f"{quoted}`) and pass the run folder it writes; or, {as_text}.")
        return (f"{arg} is a folder but not a run folder (it has no {' and '.join(RUN_FILES)}); pass a folder "
                f"`layercache train-head` wrote, or, {as_text}.")
    if stat.S_ISREG(st.st_mode):
        return (f"{arg} is a file, not a run folder; to predict its lines pass {flag('file', quoted)}; {as_text}.")
    return f"{arg} is {kind_of(st)}, not a run folder; {as_text}."


def split_runs(args: Sequence[str], literal: int = 0) -> tuple[list[str], list[str]]:
    """``RUN [RUN ...] TEXT ...`` -> (runs, texts), by the rule of the module docstring.

    ``literal``: how many of the last arguments are texts whatever they look like (those after
    ``--``). Raises :class:`~layercache.errors.ConfigError` for an argument that looks like a path
    and is not a run folder, and when no run folder leads.
    """
    args = [os.fspath(a) for a in args]
    literal = max(0, min(literal, len(args)))
    head, tail = args[:len(args) - literal], args[len(args) - literal:]
    n = 0
    while n < len(head) and is_run_folder(head[n]):
        n += 1
    for arg in head[n:]:
        problem = path_argument_problem(arg)
        if problem is not None:
            raise ConfigError(problem)
    if n == 0:
        first = args[0] if args else None
        where = f"{first!r} is not a run folder" if first else "no run folder was given"
        raise ConfigError(f"Nothing to predict with: {where}; start with the run folders `layercache train-head` "
                          "wrote, then the texts.")
    return head[:n], [*head[n:], *tail]


def run_files(runs: Sequence[str | os.PathLike]) -> list[Path]:
    """The files a bundle of ``runs`` reads (each run's config and weights)."""
    return [Path(run, name) for run in runs for name in RUN_FILES]


@computes
def predict_texts(runs: Sequence[str | os.PathLike], texts: Sequence[Input] = (), *,
                  file: str | os.PathLike | None = None, text_field: str = "text",
                  out: str | os.PathLike | None = None, backbone: str | None = None, device: str = "auto",
                  batch_size: int = 32, allow_pickle: bool = False, progress: bool = False,
                  device_map: str | None = None, max_memory: Mapping[str, int | str] | None = None
                  ) -> BundlePredictions:
    """Load ``runs`` with their backbone (or ``backbone``) and predict ``texts`` (then ``file``'s), batched by length.

    Args:
        file: more texts, one per line or the ``text_field`` of each line of a ``.jsonl`` file, whose
            other fields (``id`` and the rest) ``out`` keeps beside each prediction: first, in their
            order, then ``text`` and each run's predictions; a field named ``text`` (other than the text
            field itself) or like a run is refused before anything loads (:func:`check_field_names`).
        out: write one JSON object per text there (see :mod:`.outputs`): checked before anything is
            read or loaded (refused when it is the input file, a file or new name inside a run's, its
            cache's or the backbone's folder (:mod:`.guarded`), a link, a FIFO, or cannot be written),
            written atomically after.
        allow_pickle: load a backbone that has only pickle weights, as ``extract --allow-pickle`` did.
        progress: a bar on stderr (in a terminal; plain lines in a pipe or log), advanced as each batch finishes.
        device_map, max_memory: split a backbone larger than one device (see
            :func:`~layercache.backbone.loader.load_backbone`).
    """
    check_max_memory(device_map, max_memory)
    target = None
    if out is not None:
        target = check_output_file(out, [*([file] if file is not None else []), *run_files(runs)],
                                   guarded=predict_places(runs, backbone))
    texts = list(texts)
    fields: list[dict] = [{} for _ in texts]  # what each input line holds besides its text (a .jsonl file's)
    if file is not None:
        lines = read_input_lines(file, text_field)
        texts += [text for text, _ in lines]
        fields += [row for _, row in lines]
    if not texts:
        after = " after the run folders" if command_line() else ""
        raise ConfigError(f"Nothing to predict: give texts{after}, or {option('file')} with one text per line.")
    if target is not None:
        check_field_names(fields, runs, text_field, file)
    bundle = LiveBundle.from_runs(runs, backbone, device=device, allow_pickle=allow_pickle, device_map=device_map,
                                  max_memory=max_memory)
    with counting_progress("predicting", progress, total=len(texts), unit="texts") as (advance, _):
        result = bundle.predict(texts, batch_size=batch_size, progress=advance)
    if target is not None:
        write_jsonl(result, target, fields)
    return result


def write_jsonl(result: BundlePredictions, path: str | os.PathLike, fields: Sequence[Mapping] | None = None) -> Path:
    """Write ``result.rows()`` to ``path``, one JSON object per line, atomically (see :func:`.outputs.write_lines`).

    ``fields``: per input, the fields of its input line to keep, first and in their order (``id`` and the
    rest of a ``.jsonl`` line); the row's ``text`` and predictions follow (:func:`check_field_names` has
    refused any other field of those names).
    """
    rows = result.rows()
    if fields is not None:
        rows = [{**kept, **row} for kept, row in zip(fields, rows)]
    return write_lines(path, [json.dumps(row, ensure_ascii=False) + "\n" for row in rows])


def check_field_names(fields: Sequence[Mapping], runs: Sequence[str | os.PathLike], text_field: str,
                      file: str | os.PathLike | None) -> None:
    """Refuse an input field that an output line writes too (``text``, a run's name): one of them would be lost.

    The text field itself may be ``text``: the line's ``text`` is then the text predicted (a word list
    joined by single spaces).
    """
    uses = {"text": ("the text predicted", "that field")}
    uses.update({name: (f"the predictions of the run {run}", "that field or the run folder")
                 for name, run in zip(run_names(runs), runs)})
    for row in fields:
        clash = next((key for key in row if key in uses and not (key == "text" == text_field)), None)
        if clash is not None:
            what, rename = uses[clash]
            raise ConfigError(f"The input file {file} has a field {clash!r}, and every line {option('out')} writes "
                              f"holds {what} under that name; rename {rename} so that neither is lost.")
