"""Run folders on disk: writing a head's config and weights, and reading them back with checks.

A run folder holds ``config.json`` (plain JSON) and ``weights.safetensors`` (no pickle), plus any
other JSON files the caller adds (``metrics.json``, ``layer_weights.json``). It is written whole
(:mod:`.run_folder`: locked, staged, committed), each file atomically with the mode of any new
file (:mod:`layercache.core.files`). A damaged file is refused with a
:class:`~layercache.errors.ConfigError` that names it, here where it is read, so every reader
(``eval``, ``predict``, the live bundle) refuses alike: a config whose tasks do not agree with the
heads it describes, weights that are NaN or infinite. Nothing in config.json is used as a path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ...core.files import why_unwritable, write_file_atomic, write_text_atomic
from ...core.option_names import option
from ...core.tasks import TASK_KINDS, LabelTask
from ...errors import ConfigError
from ...store.feature_source import parse_source
from ..scoring.selection import SELECTION_METRICS
from .run_files import RunConfig, load_json
from .run_folder import CONFIG_FILE, WEIGHTS_FILE, RunFolder, StagedRun
from .run_sections import RunSection


def write_run(path: str | os.PathLike | StagedRun, state: dict[str, Tensor], config: RunConfig,
              extra_json: Mapping[str, Any]) -> Path:
    """Write ``state`` as the weights file, ``config`` as config.json and each ``extra_json`` as ``<name>.json``
    (a JSON object, or a typed section of the run: :class:`~.run_files.RunMetrics`, :class:`~.run_files.LayerWeights`).

    ``path`` is a folder, written whole (:class:`~.run_folder.RunFolder`: a folder that holds a run
    has its run files replaced, anything else in it is kept), or a :class:`~.run_folder.StagedRun`
    whose owner commits it. Returns the run folder.
    """
    if not isinstance(path, StagedRun):
        with RunFolder.claim(path, overwrite=True) as folder:
            write_run(folder.run(), state, config, extra_json)
            return folder.commit()
    try:
        write_file_atomic(path.file(WEIGHTS_FILE), lambda tmp: save_file(state, str(tmp)))
        write_json(path.file(CONFIG_FILE), config.to_json())
        for name, payload in extra_json.items():
            write_json(path.file(f"{name}.json"), payload.to_json() if isinstance(payload, RunSection) else payload)
    except (OSError, SafetensorError) as err:  # read-only disk, permissions, full disk (safetensors: its own type)
        raise unwritable(path.final, err) from None
    return path.final


def unwritable(folder: Path, err: BaseException) -> ConfigError:
    """The one sentence for a run folder that cannot be written (a full disk, permissions ...)."""
    return ConfigError(f"The run folder {folder} cannot be written ({why_unwritable(err)}), and nothing of the run "
                       f"was kept; free space or choose another {option('out')}, and train again.")


def run_files(path: Path) -> tuple[Path, Path]:
    """The config and weights files of the run folder ``path``, refused unless both exist."""
    config_file, weights_file = path / CONFIG_FILE, path / WEIGHTS_FILE
    if not config_file.is_file() or not weights_file.is_file():
        raise ConfigError(f"{path} is not a layercache run folder (it needs {CONFIG_FILE} and "
                          f"{WEIGHTS_FILE}); pass the folder `layercache train-head` wrote.")
    return config_file, weights_file


def read_run_config(config_file: Path) -> RunConfig:
    """A run's config.json as its typed section, checked for the keys and types :meth:`LayerHead.load` relies on."""
    try:
        config = load_json(config_file)
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON
        raise damaged(config_file, f"it is not readable JSON: {error_detail(err)}") from None
    if not isinstance(config, dict):
        raise damaged(config_file, f"it holds a JSON {type(config).__name__}, not an object")
    expected = {"params": dict, "model": dict, "layer_names": list, "source": str, "cache": dict, "train": dict}
    for key, kind in expected.items():
        if key not in config:
            raise damaged(config_file, f"it lacks the setting {key!r}")
        if not isinstance(config[key], kind):
            raise damaged(config_file, f"its setting {key!r} is a {type(config[key]).__name__}, "
                                       f"not a {kind.__name__}")
    if not all(isinstance(n, str) for n in config["layer_names"]):
        raise damaged(config_file, "its 'layer_names' are not all strings")
    try:
        parse_source(config["source"], allow_auto=False)
    except ConfigError:
        raise damaged(config_file, f"its 'source' {config['source']!r} is neither tokens nor pooled:<mode>") from None
    for key in ("model", "model_fingerprint", "tokenizer_fingerprint", "hidden_size"):
        if key not in config["cache"]:
            raise damaged(config_file, f"its 'cache' lacks {key!r}")
    if not isinstance(config["cache"]["hidden_size"], int) or isinstance(config["cache"]["hidden_size"], bool):
        raise damaged(config_file, "its 'cache.hidden_size' is not an integer")
    if not isinstance(config.get("data", {}), dict):
        raise damaged(config_file, "its 'data' is not an object")
    for key in ("selection", "fit"):  # absent or null: a run saved before they were recorded
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise damaged(config_file, f"its {key!r} is not an object")
    _check_tasks(config_file, config["model"], config["source"], config.get("selection"))
    return RunConfig.from_json(config)


#: Head options only a sequence (or regression) head keeps, and only a token head keeps: a task whose
#: kind was edited keeps the options of its old kind (:meth:`~..network.model.HeadModel._resolve_head_options`).
SEQUENCE_ONLY, TOKEN_ONLY = ("pooling", "hidden"), ("encoder_layers", "ff_dim")


def _check_tasks(config_file: Path, model: dict, source: str, selection) -> None:
    """Refuse a model config whose tasks disagree with the heads it describes (a task kind edited by hand)."""
    if model.get("kind") == "ensemble":
        members = model.get("members")
        if not isinstance(members, list) or not members or not all(isinstance(m, dict) for m in members):
            raise damaged(config_file, "its ensemble has no list of member models")
        for member in members:
            _check_tasks(config_file, member, source, None)
        return
    tasks = model.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise damaged(config_file, "its model has no list of tasks")
    options = model.get("head_options") if isinstance(model.get("head_options"), dict) else {}
    metrics = selection.get("metric", {}) if isinstance(selection, dict) else {}
    for data in tasks:
        try:
            task = LabelTask.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise damaged(config_file, f"a task of its model is not a task ({error_detail(err)}; kinds: "
                                       f"{', '.join(TASK_KINDS)})") from None
        kept = options.get(task.name) if isinstance(options.get(task.name), dict) else {}
        wrong = [k for k in (TOKEN_ONLY if task.kind != "token" else SEQUENCE_ONLY) if k in kept]
        if task.kind == "token" and source != "tokens":
            wrong.append(f"source {source}")
        if wrong:
            raise damaged(config_file, f"task {task.name!r} is a {task.kind} task but its head has "
                                       f"{', '.join(wrong)}, which a {task.kind} head never has")
        metric = metrics.get(task.name) if isinstance(metrics, dict) else None
        if metric is not None and not (metric in SELECTION_METRICS and SELECTION_METRICS[metric].applies_to(task)):
            raise damaged(config_file, f"task {task.name!r} is a {task.kind} task but was selected on {metric!r}, "
                                       "which does not apply to it")


def read_weights(weights_file: Path) -> dict[str, Tensor]:
    """The tensors of a run's weights file, refused in one sentence when it is truncated, damaged or not finite.

    The one place weights are read: ``LayerHead.load`` and through it ``eval``, ``predict`` and the
    live bundle. A NaN or an infinity in any floating tensor would turn every prediction into NaN
    (``predict`` printed "0 (nan)"), so it is refused here, naming the tensor.
    """
    try:
        state = load_file(str(weights_file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ConfigError(f"The weights file {weights_file} cannot be read ({error_detail(err)}); it is truncated "
                          "or damaged: restore it or train the head again.") from None
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            what = "NaN" if bool(torch.isnan(tensor).any()) else "infinite values"
            raise ConfigError(f"The weights file {weights_file} holds {what} in {name!r}, so every prediction would "
                              "be NaN; it is damaged or its training diverged: restore it or train the head again.")
    return state


def load_weights(model: nn.Module, state: dict[str, Tensor], weights_file: Path) -> None:
    """Load ``state`` (read from ``weights_file``) into ``model``, refusing tensors that do not fit it."""
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # a size mismatch, a missing or an unexpected tensor
        raise ConfigError(f"The weights in {weights_file} do not fit the model its {CONFIG_FILE} describes "
                          f"({error_detail(err)}); one of the two files is damaged: restore them or train the "
                          "head again.") from None


def error_detail(err: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, without its final full stop, cut to ``limit`` characters.

    torch's load_state_dict message starts with a header line; the line after it names the tensor.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict"):
        lines = lines[1:]
    text = (lines[0] if lines else type(err).__name__).rstrip(".")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def damaged(config_file: Path, why: str) -> ConfigError:
    """The error for a run config that cannot be used, saying ``why``."""
    return ConfigError(f"The run config {config_file} cannot be used ({why}); it is damaged or from another "
                       "layercache version: restore it or train the head again.")


def jsonable(value):
    """``value`` with numpy scalars as Python numbers and tuples as lists, dict keys as strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def write_json(path: Path, payload) -> None:
    """Write ``payload`` as indented JSON, atomically, with the mode of any new file (anything JSON cannot hold as its
    ``str``)."""
    write_text_atomic(path, json.dumps(jsonable(payload), indent=2, default=str) + "\n")
