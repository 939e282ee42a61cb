"""The manifest's typed schema: every field a reader relies on, its type and its bounds.

``manifest.json`` is read by extraction (to resume), by the reader (to find rows in shards) and by
every trainer. A manifest edited by hand, truncated by a bad copy or written by another tool must
not reach them half-valid: a negative row count silently drops rows, a ``splits`` list crashes
deep inside a read, and a shard path such as ``../../x`` would make a resume delete files outside
the cache. So a manifest is checked against this schema as a whole, on read, before anything uses
it; the first violation becomes one :class:`ManifestSchemaError` naming the field.

Two kinds of rules:

- *types and bounds* per field, written declaratively below (:data:`MANIFEST_SCHEMA`);
- *consistency* across fields (:func:`check_consistency`): shard files are exactly
  ``<split>/shard-NNNNN.h5`` in batch order and never overlap, rows and batches of a complete split
  run on without gaps, written counts never exceed planned ones, a complete cache has every row,
  layer lists agree.

Sections a newer writer may extend (``model``, ``dataset`` ...) accept extra keys; the keys
listed here must be present with the right type.

Whose manifest it is comes before whether it is valid (:func:`foreign_manifest_problem`): any
folder may hold a file called ``manifest.json`` (a web app's, a dataset's), and only one that
layercache wrote may be read as a damaged cache, or cleared by ``--overwrite``. The rule: a JSON
object holding an integer ``format_version`` and a string ``config_hash``, two keys every
layercache manifest has had since format 1 and that together name no other common format.
A manifest that passes it but not the schema is a damaged layercache manifest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.checksum import ALGORITHM
from ..core.tasks import TASK_KINDS
from .codecs import codec_names
from .compression import COMPRESSIONS

POOLING_MODES = ("mean", "first", "last")
"""Pooled vectors a cache may hold per example (mask-aware)."""
STORE_MODES = ("tokens", "pooled")
"""``tokens``: every real token's states (and pooled vectors); ``pooled``: pooled vectors only."""
PROJECTION_BASES = ("pca", "standardized")
"""How a ``--project K`` basis is fitted (:mod:`layercache.store.projection`): ``pca``, the covariance's top K
eigenvectors; ``standardized``, the correlation matrix's (PCA of the states scaled to unit variance per dimension)."""
MODEL_KINDS = ("encoder", "decoder", "encoder-decoder")
FINAL_NORMS = ("none", "applied", "not-applied")
SHARD_FILE = re.compile(r"shard-(\d{5,})\.h5")
SIDE_FILES = {"vocabulary": "vocab.json", "lens": "lens.safetensors", "projection": "projection.safetensors"}
"""Kind -> the one name a side file of that kind may have in the cache folder (``manifest.side_files``)."""
OWN_FILES = ("manifest.json", ".layercache.lock", *SIDE_FILES.values())
"""Files a cache keeps beside its split folders: no split may take one of these names."""
OWN_FILE_PATTERN = re.compile(r"manifest-part-\d{5,}\.json", re.IGNORECASE)
"""Names a cache's own files may take beside the fixed ones: writers' manifest parts (:mod:`.parts`)."""
NAME_MAX_BYTES = 255
"""Longest file or folder name (in UTF-8 bytes) that Linux and macOS file systems take."""
CHECKSUM = re.compile(rf"{ALGORITHM}:[0-9a-f]{{32}}")
# Split and task names become folder names and HDF5 paths: no separators, no leading dot, no control characters.
SAFE_NAME = re.compile(r"[^/\\\x00-\x1f.][^/\\\x00-\x1f]*")


class ManifestSchemaError(ValueError):
    """A manifest field has the wrong type, an impossible value, or disagrees with another field."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}")
        self.where, self.problem = where, problem


def is_safe_name(name: object) -> bool:
    """Whether ``name`` can be a split folder or a task's HDF5 path component: no separators, no ``..``."""
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None


def split_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a split folder of a cache, or None when it can.

    Beyond :func:`is_safe_name`: a split may not take the name of one of the cache's own files
    (:data:`OWN_FILES`, compared case-insensitively, as macOS and Windows compare names), and its
    folder name must fit the file system's limit of :data:`NAME_MAX_BYTES` bytes.
    """
    if not is_safe_name(name):
        return "has a '/', a '\\', a control character or a leading '.'"
    own = next((own for own in OWN_FILES if own.casefold() == name.casefold()), None)
    if own is not None:
        return f"is the name of the cache's own file {own}"
    if OWN_FILE_PATTERN.fullmatch(name):
        return "has the name of a writer's manifest part file"
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
        return f"is longer than the {NAME_MAX_BYTES} bytes a folder name may have"
    return None


def foreign_manifest_problem(data: Any) -> str | None:
    """Why parsed ``manifest.json`` content is not a manifest layercache wrote, or None when it is one (valid or not).

    A layercache manifest is a JSON object with an integer ``format_version`` and a string
    ``config_hash`` (see the module docstring); nothing else is ever read as a cache or cleared.
    """
    if not isinstance(data, dict):
        return f"is a JSON {_type_name(data)}, where a layercache manifest should be a JSON object"
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return "has no integer format_version"
    if not isinstance(data.get("config_hash"), str):
        return "has no config_hash"
    return None


# --- field specs ---------------------------------------------------------------------------
Spec = Callable[[Any, str], None]


def _fail(where: str, problem: str) -> None:
    raise ManifestSchemaError(where, problem)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def integer(minimum: int | None = 0) -> Spec:
    """A spec for an int (not a bool) of at least ``minimum`` (no bound when ``None``)."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            _fail(where, f"should be an integer, found {_type_name(value)} {value!r:.40}")
        if minimum is not None and value < minimum:
            _fail(where, f"should be at least {minimum}, found {value}")
    return check


def number() -> Spec:
    """A spec for an int or float (not a bool)."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            _fail(where, f"should be a number, found {_type_name(value)} {value!r:.40}")
    return check


def boolean() -> Spec:
    """A spec for ``true`` or ``false``."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, bool):
            _fail(where, f"should be true or false, found {_type_name(value)} {value!r:.40}")
    return check


def text(choices: tuple[str, ...] | None = None, pattern: re.Pattern | None = None, what: str = "") -> Spec:
    """A spec for a string, optionally one of ``choices`` and/or fully matching ``pattern`` (``what`` describes it)."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, str):
            _fail(where, f"should be a string, found {_type_name(value)} {value!r:.40}")
        if choices is not None and value not in choices:
            _fail(where, f"should be one of {', '.join(choices)}, found {value!r:.40}")
        if pattern is not None and not pattern.fullmatch(value):
            _fail(where, f"should be {what or 'of the form ' + pattern.pattern}, found {value!r:.60}")
    return check


def optional(spec: Spec) -> Spec:
    """A spec that accepts ``null`` and otherwise applies ``spec``."""
    def check(value: Any, where: str) -> None:
        if value is not None:
            spec(value, where)
    return check


def list_of(spec: Spec, *, non_empty: bool = False) -> Spec:
    """A spec for a list (non-empty if asked) whose every item passes ``spec``."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            _fail(where, f"should be a list, found {_type_name(value)}")
        if non_empty and not value:
            _fail(where, "should not be empty")
        for i, item in enumerate(value):
            spec(item, f"{where}[{i}]")
    return check


def dict_of(spec: Spec, key: Spec | None = None) -> Spec:
    """A spec for an object whose values pass ``spec`` (and keys pass ``key``, when given)."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _fail(where, f"should be an object, found {_type_name(value)}")
        for k, item in value.items():
            if key is not None:
                key(k, f"{where} key")
            spec(item, f"{where}.{k}")
    return check


@dataclass(frozen=True)
class Record:
    """A JSON object with required and optional keys of given specs; other keys are allowed."""

    required: Mapping[str, Spec]
    optional: Mapping[str, Spec] | None = None

    def __call__(self, value: Any, where: str) -> None:
        """Check ``value`` (found at ``where``); raises :class:`ManifestSchemaError` at the first violation."""
        if not isinstance(value, dict):
            _fail(where, f"should be an object, found {_type_name(value)}")
        for key, spec in self.required.items():
            if key not in value:
                _fail(f"{where}.{key}".lstrip("."), "is missing")
            spec(value[key], f"{where}.{key}".lstrip("."))
        for key, spec in (self.optional or {}).items():
            if key in value:
                spec(value[key], f"{where}.{key}".lstrip("."))


_COST = Record({"metric": text(), "reference": number(), "score": number(), "loss_points": number(),
                "interval_points": list_of(number())})
QUALITY = Record({"choice": text(), "sample": text(), "seed": integer(), "examples": integer(1),
                  "probes": dict_of(_COST)}, {"head": dict_of(_COST), "seconds": number(), "max_loss_points": number(),
                                              "more_faithful": Record({"choice": text()})})
"""``extraction.quality``: a lossy cache's measured cost (:attr:`~.sections.ExtractionSection.quality`)."""


def _safe_name(what: str) -> Spec:
    return text(pattern=SAFE_NAME, what=f"a {what} name without '/', '\\\\' or a leading '.'")


def _storage_dtype(value: Any, where: str) -> None:
    """A storage dtype some codec reads (:mod:`layercache.store.codecs`)."""
    text(tuple(codec_names()))(value, where)


def _split_name(value: Any, where: str) -> None:
    """A split name that can be a folder beside the cache's own files (:func:`split_name_problem`)."""
    _safe_name("split")(value, where)
    problem = split_name_problem(value)
    if problem:
        _fail(where, f"{problem}, found {value[:60]!r}")


SHARD = Record({
    "file": text(), "first_row": integer(), "n_examples": integer(1), "n_tokens": integer(), "first_batch": integer(),
    "n_batches": integer(1), "bytes": integer(1),
    "checksum": text(pattern=CHECKSUM, what=f"'{ALGORITHM}:' and 32 hex digits (the only checksum scheme this "
                                            "layercache knows)"),
})
SPLIT = Record(
    {"n_examples": integer(), "n_tokens": integer(), "n_batches": integer(), "shards": list_of(SHARD),
     "complete": boolean()},
    {"n_truncated": integer(), "n_windowed": integer(), "n_skipped_empty": integer(),
     "stats": dict_of(dict_of(number()))},
)
SIDE_FILE = Record({"file": text(tuple(SIDE_FILES.values())), "bytes": integer(1),
                    "checksum": text(pattern=CHECKSUM, what=f"'{ALGORITHM}:' and 32 hex digits")})
TASK = Record({"name": _safe_name("task"), "kind": text(TASK_KINDS), "label_names": optional(list_of(text()))})
MANIFEST_SCHEMA = Record(
    {
        "format_version": integer(),
        "model": Record({"name": text(), "fingerprint": text(), "kind": text(MODEL_KINDS), "n_layers": integer(1),
                         "hidden_size": integer(1), "final_norm": text(FINAL_NORMS), "forward_dtype": text(),
                         "architecture": text(), "device": text()},
                        {"source": text(), "revision": optional(text()), "model_type": optional(text()),
                         "placement": dict_of(integer(1))}),
        "tokenizer": Record({"class": text(), "fingerprint": text(), "max_length": integer(1)},
                            {"stride": optional(integer()), "pad_from": optional(text()), "padding_side": text()}),
        "dataset": Record({"name": text(), "fingerprint": text(), "text_columns": list_of(text())},
                          {"config": optional(text()), "columns": list_of(text()), "limit": optional(integer(1)),
                           "files": optional(dict_of(text()))}),
        "tasks": list_of(TASK),
        "storage": Record({"dtype": _storage_dtype, "layers": list_of(integer(), non_empty=True),
                           "layer_names": list_of(text(), non_empty=True), "store": text(STORE_MODES),
                           "pooling": list_of(text(POOLING_MODES)), "shard_bytes": integer(1)},
                          # mean_skip_first: absent (caches written before it existed) means false.
                          {"all_layer_names": list_of(text()), "final_norm": text(FINAL_NORMS),
                           "mean_skip_first": boolean(), "project": integer(1), "pooled_dtype": _storage_dtype,
                           "project_basis": text(PROJECTION_BASES), "compression": text(COMPRESSIONS)}),
        "extraction": Record({}, {"batch_tokens": integer(1), "batch_size": integer(1), "planner": text(),
                                  "fp16_overflow": integer(), "fp16_overflow_by_split": dict_of(integer()),
                                  "storage_dtype_auto": text(), "projection_variance": list_of(number()),
                                  "projection_tokens": integer(), "quality": QUALITY}),
        "splits": dict_of(SPLIT, key=_split_name),
        "config_hash": text(),
        "complete": boolean(),
    },
    # side_files: absent in caches written before extraction saved the vocabulary and the lens.
    {"created_at": text(), "updated_at": text(), "layercache_version": text(),
     "side_files": dict_of(SIDE_FILE, key=text(tuple(SIDE_FILES)))},
)


# --- consistency -----------------------------------------------------------------------------
def check_consistency(data: dict) -> None:
    """Rules that tie fields together; ``data`` has passed :data:`MANIFEST_SCHEMA` already."""
    storage, model = data["storage"], data["model"]
    if len(storage["layers"]) != len(storage["layer_names"]):
        _fail("storage.layer_names", f"has {len(storage['layer_names'])} names for {len(storage['layers'])} "
                                     "kept layers")
    if len(set(storage["layers"])) != len(storage["layers"]) or max(storage["layers"]) > model["n_layers"]:
        _fail("storage.layers", f"should be distinct states 0..{model['n_layers']}, found {storage['layers']}")
    if storage["store"] == "pooled" and not storage["pooling"]:
        _fail("storage.pooling", "is empty, but a pooled-only cache needs at least one pooling mode")
    if "project" in storage:
        if storage["project"] >= model["hidden_size"]:
            _fail("storage.project", f"should be below the model's width {model['hidden_size']}, "
                                     f"found {storage['project']}")
        if "projection" not in data.get("side_files", {}):
            _fail("side_files.projection", "is missing, but storage.project says the states are projected")
    elif "project_basis" in storage:
        _fail("storage.project_basis", "is set, but storage.project is missing (the states are not projected)")
    names = [t["name"] for t in data["tasks"]]
    if len(set(names)) != len(names):
        _fail("tasks", f"names a task twice ({', '.join(names)})")
    for i, task in enumerate(data["tasks"]):
        if (task["kind"] == "regression") != (task["label_names"] is None):
            _fail(f"tasks[{i}].label_names", f"{'must be null' if task['kind'] == 'regression' else 'is missing'} "
                                             f"for a {task['kind']} task")
    for kind, entry in data.get("side_files", {}).items():
        if entry["file"] != SIDE_FILES[kind]:
            _fail(f"side_files.{kind}.file", f"should be {SIDE_FILES[kind]!r}, found {entry['file']!r:.80}")
    for name, split in data["splits"].items():
        _check_split(name, split, data["format_version"])
    if data["complete"]:
        unfinished = [name for name, split in data["splits"].items() if not split["complete"]]
        if unfinished:
            _fail("complete", f"is true while split {unfinished[0]!r} is not complete")


def _check_split(name: str, split: dict, version: int) -> None:
    """Shard names, row and batch ranges of one split (format 1: consecutive from batch 0; format 2: see below).

    Format 2 names a shard after its first planned batch and lets an unfinished split have gaps
    (several writers fill their shares at once, :mod:`layercache.store.parts`): shards are listed in
    batch order and never overlap; a shard that starts where the one before ends starts at its row
    too, one after a gap at a later row. A complete split has no gaps, in either format. A format 1
    cache resumed by this version keeps its shards' order numbers beside the new batch numbers
    (the two never collide: a shard's first batch is at least its place in the list).
    """
    where = f"splits.{name}"
    row = batch = tokens = rows = 0
    gaps = False
    for i, shard in enumerate(split["shards"]):
        at = f"{where}.shards[{i}]"
        number = i if version == 1 else shard["first_batch"]
        expected = f"{name}/shard-{number:05d}.h5"
        if shard["file"] != expected and (version == 1 or shard["file"] != f"{name}/shard-{i:05d}.h5"):
            # The one form a shard path may take: no absolute paths, no '..', no other folder.
            _fail(f"{at}.file", f"should be {expected!r}, found {shard['file']!r:.80}")
        gap = shard["first_batch"] != batch
        if gap and (version == 1 or shard["first_batch"] < batch):
            _fail(f"{at}.first_batch", f"should be {batch}" + ("" if version == 1 else " or later")
                  + f", found {shard['first_batch']}")
        if (not gap and shard["first_row"] != row) or (gap and shard["first_row"] <= row):
            _fail(f"{at}.first_row", f"should be {'after ' if gap else ''}{row} (where the previous shard ends), "
                                     f"found {shard['first_row']}")
        gaps = gaps or gap
        row = shard["first_row"] + shard["n_examples"]
        batch = shard["first_batch"] + shard["n_batches"]
        tokens += shard["n_tokens"]
        rows += shard["n_examples"]
    for what, written, planned in (("rows", row, split["n_examples"]), ("batches", batch, split["n_batches"]),
                                   ("tokens", tokens, split["n_tokens"])):
        if written > planned:
            _fail(where, f"lists {'up to ' if what != 'tokens' else ''}{written} {what} in its shards but plans "
                         f"only {planned}")
    if split["complete"] and (gaps or (rows, batch) != (split["n_examples"], split["n_batches"])):
        _fail(f"{where}.complete", f"is true with {rows} of {split['n_examples']} rows written")
    for count in ("n_truncated", "n_windowed"):
        if split.get(count, 0) > split["n_examples"]:
            _fail(f"{where}.{count}", f"is {split[count]}, more than the split's {split['n_examples']} examples")


def validate_manifest(data: Any) -> None:
    """Check a parsed ``manifest.json`` against the schema and the consistency rules.

    Raises :class:`ManifestSchemaError` naming the first bad field.
    """
    MANIFEST_SCHEMA(data, "")
    check_consistency(data)
