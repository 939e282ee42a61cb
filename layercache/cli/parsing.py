"""Turning command-line text into library arguments: sizes, lists, splits, KEY=VALUE settings, layers."""

from __future__ import annotations

import json
import re

from ..core.devices import check_max_memory
from ..errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def parse_size(text: str) -> int:
    """``256MiB``, ``1.5GB``, ``4096`` -> bytes."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").lower() if match else None
    if not match or unit not in _UNITS:
        raise ConfigError(f"Size {text!r} is not understood; write e.g. 256MiB, 1GB or 4096.")
    return int(float(match.group(1)) * _UNITS[unit])


def size_text(n: int) -> str:
    """Bytes as :func:`parse_size` reads them back, in the largest binary unit that divides them: ``256MiB``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n and n % _UNITS[unit.lower()] == 0:
            return f"{n // int(_UNITS[unit.lower()])}{unit}"
    return str(n)


def parse_max_memory(values: list[str] | None, device_map: str | None) -> dict[str, int] | None:
    """``--max-memory cuda:0=20GiB --max-memory cpu=60GiB`` -> ``{"cuda:0": 21474836480, "cpu": ...}`` (bytes).

    Refused without ``--device-map`` (``device_map``), before the command does anything: it would be ignored.
    """
    check_max_memory(device_map, values)
    if not values:
        return None
    out = {}
    for value in values:
        device, sep, size = value.partition("=")
        if not sep or not device.strip():
            raise ConfigError(f"--max-memory {value!r} should look like DEVICE=SIZE, e.g. cuda:0=20GiB or cpu=60GiB.")
        out[device.strip()] = parse_size(size)
    return out


def parse_threads(text: str) -> int | None:
    """``--threads``: ``auto`` -> None (the library's default), ``4`` -> 4."""
    value = text.strip().lower()
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"--threads must be a whole number of at least 1 or auto, got {text!r}.")
    return int(value)


def split_list(values: list[str] | None) -> list[str]:
    """Options that take lists accept repeats and commas: ``--layers 0,3 --layers -1``."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def parse_splits(values: list[str] | None) -> tuple[list[str] | None, dict[str, str] | None]:
    """``--split train`` picks hub splits; ``--split train=path.tsv`` maps local files to splits."""
    names, files = [], {}
    for value in values or []:
        if "=" in value:
            name, path = value.split("=", 1)
            if not name or not path:
                raise ConfigError(f"--split {value!r} should look like NAME=PATH, e.g. train=data/train.tsv.")
            if name in files:  # a dict would silently keep only the last file
                raise ConfigError(f"--split names the split {name!r} twice ({files[name]} and {path}); give each "
                                  "split one file, or name them apart (e.g. train=A --split extra=B).")
            files[name] = path
        elif value in names:
            raise ConfigError(f"--split names the split {value!r} twice; give each split once.")
        else:
            names.append(value)
    if names and files:
        raise ConfigError("--split takes either split names or NAME=PATH files, not both.")
    return names or None, files or None


def parse_assignments(values: list[str] | None, what: str) -> dict:
    """``--mixer-option k=64 --mixer-option alpha=70`` -> ``{"k": 64, "alpha": 70.0}`` (JSON values)."""
    out = {}
    for value in values or []:
        key, sep, raw = value.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {value!r} should look like KEY=VALUE, e.g. k=64.")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw  # a bare word stays a string: pooling=attention
    return out


def parse_loss_weights(values: list[str] | None) -> dict[str, float]:
    """``--loss-weight sentiment=0.5`` -> ``{"sentiment": 0.5}``; a weight that is not a number is refused."""
    weights = parse_assignments(values, "--loss-weight")
    for name, value in weights.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"--loss-weight {name}={value!r} needs a number, e.g. {name}=0.5.")
    return weights


def layer_specs(values: list[str] | None) -> list[int | str]:
    """``--layers`` values as layer specs: ``"-1"`` -> ``-1``, names stay names (see :mod:`layercache.core.layers`)."""
    from ..core.layers import parse_layer_spec

    return [parse_layer_spec(v) for v in split_list(values)]


def parse_metric(values: list[str] | None) -> str | dict[str, str] | None:
    """``--metric mcc`` -> ``"mcc"`` (every task); ``--metric sentiment=mcc --metric intensity=r2`` -> a dict."""
    values = [v.strip() for v in values or [] if v.strip()]
    if not values:
        return None
    bare = [v for v in values if "=" not in v]
    if bare and len(values) > 1:
        raise ConfigError(f"--metric takes one NAME for every task or TASK=NAME per task, got {', '.join(values)}; "
                          "write e.g. --metric sentiment=mcc --metric intensity=r2.")
    if bare:
        return bare[0]
    out = {}
    for value in values:
        task, _, name = value.partition("=")
        if not task.strip() or not name.strip():
            raise ConfigError(f"--metric {value!r} should look like NAME or TASK=NAME, e.g. sentiment=mcc.")
        if task.strip() in out:
            raise ConfigError(f"--metric names task {task.strip()!r} twice; give its metric once.")
        out[task.strip()] = name.strip()
    return out


def _class_weights(text: str, given: str) -> str | dict[str, float]:
    """``balanced`` stays a word; ``neg=2,pos=1`` -> ``{"neg": 2.0, "pos": 1.0}``."""
    if "=" not in text:
        return text.strip()
    out = {}
    for pair in text.split(","):
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--class-weight {given!r} should be balanced or CLASS=WEIGHT pairs, e.g. neg=2,pos=1.")
        try:
            out[name.strip()] = float(raw)
        except ValueError:
            raise ConfigError(f"--class-weight {name.strip()}={raw.strip()!r} needs a number, e.g. "
                              f"{name.strip()}=2.") from None
    return out


def parse_class_weight(values: list[str] | None) -> str | dict | None:
    """``--class-weight`` values as :class:`~layercache.heads.LayerHead`'s ``class_weight``.

    ``balanced`` or ``neg=2,pos=1`` (classes by name or index) for the head's classification
    task(s); ``TASK:balanced`` or ``TASK:neg=2,pos=1`` for one task of several, repeatable.
    """
    values = [v.strip() for v in values or [] if v.strip()]
    if not values:
        return None
    per_task = {}
    for value in values:
        head, sep, rest = value.partition(":")
        if sep and "=" not in head and "," not in head and head.strip():
            if head.strip() in per_task:
                raise ConfigError(f"--class-weight names task {head.strip()!r} twice; give its weights once.")
            per_task[head.strip()] = _class_weights(rest, value)
        elif len(values) > 1:
            raise ConfigError(f"--class-weight {value!r} names no task; with several values give each task's, "
                              "e.g. --class-weight sentiment:balanced --class-weight topic:food=2.")
        else:
            return _class_weights(value, value)
    return per_task


def parse_max_train(text: str) -> int | None:
    """``--max-train``: a count of at least 2, or ``0`` / ``all`` for every training example (None)."""
    value = text.strip().lower()
    if value in ("0", "all"):
        return None
    if not value.isdigit() or int(value) < 2:
        raise ConfigError(f"--max-train takes a number of training examples (at least 2), or 0 / all for every "
                          f"one; got {text!r}.")
    return int(value)
