"""The cache manifest: one JSON file that is the single source of truth about a cache.

``<cache>/manifest.json`` records what produced the cache (model, tokenizer, dataset), how it is
stored (dtype, kept states, token states or pooled only), and every committed shard with its
row range and checksum. It is always rewritten atomically (temp file + fsync + rename), so a crash
leaves either the previous or the next valid manifest, never half of one. Writers do not write
it while they extract: each lists the shards it commits in its own part file, and one merge step
folds the parts into the manifest (:mod:`.parts`), so several writers can fill one cache at once;
``complete`` turns true only in the merge that finishes a run.

Every later step (training, probing, resume) compares the manifest with what it is asked to do
and refuses a cache that does not match, instead of silently mixing data.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core.confine import OwnedFolder, check_regular_file
from ..core.files import write_text_atomic
from ..core.option_names import call
from ..core.tasks import LabelTask, find_task
from ..errors import CacheError, UnsafePathError
from .schema import ManifestSchemaError, foreign_manifest_problem, validate_manifest
from .sections import DatasetSection, ExtractionSection, ModelSection, StorageSection, TokenizerSection

FORMAT_VERSION = 2
"""Bumped whenever a reader of the previous version would misread a new cache. Version 2 names a shard
after its first planned batch (``shard-NNNNN.h5``, NNNNN the batch) so that several writers can
name theirs without asking each other (:mod:`.parts`); version 1 numbered shards in order."""
READABLE_VERSIONS = (1, 2)
"""Format versions this layercache opens. A version 1 cache reads as it always did; a run that resumes one
writes version 2 (its new shards take batch names)."""
MANIFEST_NAME = "manifest.json"


def utc_now() -> str:
    """The current UTC time as ISO 8601 to the second, e.g. ``2024-05-01T12:00:00+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class ShardInfo:
    """One committed shard file of a split."""

    file: str
    """Path relative to the cache folder, e.g. ``train/shard-00000.h5``."""
    first_row: int
    """Row of the shard's first example within the split (rows run on across shards)."""
    n_examples: int
    n_tokens: int
    first_batch: int
    n_batches: int
    bytes: int
    checksum: str
    """``"xxh3_128:<hex>"`` of the file (see :mod:`layercache.core.checksum`)."""


@dataclass
class SplitInfo:
    """One split: its planned size and the shards committed so far."""

    n_examples: int
    n_tokens: int
    """Real (unpadded) tokens after truncation or window stitching, as stored."""
    n_batches: int
    n_truncated: int = 0
    """Examples cut at the backbone's maximum length (their tail tokens are not in the cache)."""
    n_windowed: int = 0
    """Examples longer than the maximum length, run as overlapping windows and stitched (``--stride``)."""
    n_skipped_empty: int = 0
    """Source rows with no text (or no words) that were skipped; ``example_index`` still names source rows."""
    shards: list[ShardInfo] = field(default_factory=list)
    complete: bool = False
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per kept state: mean, std and rms of all token-state values, filled when the split completes."""

    @property
    def rows_written(self) -> int:
        """Examples in the committed shards."""
        return sum(s.n_examples for s in self.shards)

    @property
    def batches_written(self) -> int:
        """Forward-pass batches in the committed shards."""
        return sum(s.n_batches for s in self.shards)

    @property
    def bytes_written(self) -> int:
        """Size of the committed shard files in bytes."""
        return sum(s.bytes for s in self.shards)

    def readable_shards(self) -> list[ShardInfo]:
        """The committed shards that hold rows ``0 .. n-1`` without a gap: what a reader of an unfinished split sees.

        Several writers commit shards anywhere in a split; rows after the first gap have no row
        numbers a reader could serve yet (they belong to rows not written), so they wait for the rest.
        """
        readable, batch = [], 0
        for shard in self.shards:
            if shard.first_batch != batch:
                break
            readable.append(shard)
            batch += shard.n_batches
        return readable

    def uncovered_batches(self) -> list[int]:
        """The planned batches no committed shard covers, ascending (what is left to extract)."""
        done = bytearray(self.n_batches)
        for shard in self.shards:
            done[shard.first_batch:shard.first_batch + shard.n_batches] = b"\x01" * shard.n_batches
        return [b for b, flag in enumerate(done) if not flag]


@dataclass
class SideFile:
    """A file beside the shards, written at extraction from the model or its tokenizer.

    ``vocab.json`` (the tokenizer's id -> token table and special ids, :mod:`.vocabulary`) and, for
    decoders, ``lens.safetensors`` (final norm and unembedding, :mod:`.lens`). Both follow from the
    model and tokenizer fingerprints the configuration hash covers, so they stay outside that hash:
    a cache written before they existed keeps its hash and gets them on its next extraction run.
    """

    file: str
    """Name inside the cache folder (the schema allows only the known names)."""
    bytes: int
    checksum: str
    """``"xxh3_128:<hex>"`` of the file, checked whenever it is read."""


@dataclass
class Manifest:
    """Everything a later step needs to trust (or refuse) a cache. See ``docs`` in the README."""

    model: ModelSection
    tokenizer: TokenizerSection
    dataset: DatasetSection
    tasks: list[LabelTask]
    storage: StorageSection
    extraction: ExtractionSection
    splits: dict[str, SplitInfo]
    config_hash: str
    """Hash of every setting that determines the cache's content; resume requires it to match."""
    complete: bool = False
    format_version: int = FORMAT_VERSION
    created_at: str = field(default_factory=utc_now)
    updated_at: str = field(default_factory=utc_now)
    layercache_version: str = ""
    side_files: dict[str, SideFile] = field(default_factory=dict)
    """Kind (``vocabulary``, ``lens``) -> the file extraction wrote beside the shards; absent kinds were not written."""

    # --- convenient views -------------------------------------------------------------
    @property
    def layer_names(self) -> list[str]:
        """Names of the kept states, in storage order (``embeddings``, ``layer_1`` ...)."""
        return list(self.storage.layer_names)

    @property
    def hidden_size(self) -> int:
        """Width of the stored states: the model's hidden size, or K for a cache projected to K dimensions
        (``storage.project``; the model's own width is then ``model.hidden_size``)."""
        return int(self.storage.project or self.model.hidden_size)

    @property
    def stores_tokens(self) -> bool:
        """Whether shards hold per-token states (not only pooled vectors)."""
        return self.storage.stores_tokens

    @property
    def pooling(self) -> list[str]:
        """Pooled vectors stored per example (``mean``, ``first``, ``last``)."""
        return list(self.storage.pooling)

    def task(self, name: str) -> LabelTask:
        """The label task called ``name``; a :class:`~layercache.errors.TaskError` (a :class:`CacheError`) naming
        the known tasks if there is none."""
        return find_task(self.tasks, name)

    # --- (de)serialisation ------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The manifest as the JSON-ready dict written to ``manifest.json``."""
        data = asdict(self)  # sections become plain dicts here; each then writes exactly its own keys
        for name in _SECTIONS:
            data[name] = getattr(self, name).to_json()
        data["tasks"] = [t.to_json() for t in self.tasks]
        return data

    @classmethod
    def from_json(cls, data: Any) -> "Manifest":
        """Build a manifest from parsed JSON, refusing anything :mod:`layercache.store.schema` rejects.

        Raises :class:`CacheError` for another format version and
        :class:`~layercache.store.schema.ManifestSchemaError` for a field of the wrong type or value.
        """
        if not isinstance(data, dict):
            raise ManifestSchemaError("the manifest", f"should be a JSON object, found {type(data).__name__}")
        version = data.get("format_version")
        if version not in READABLE_VERSIONS:
            raise CacheError(
                f"This cache has format version {version!r:.20}, but this layercache reads versions "
                f"{' and '.join(map(str, READABLE_VERSIONS))}; re-extract it or install the layercache version that "
                "wrote it."
            )
        validate_manifest(data)
        fields = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in fields}
        for name, section in _SECTIONS.items():
            data[name] = section.from_json(data[name])
        data["tasks"] = [LabelTask.from_json(t) for t in data["tasks"]]
        split_fields = {f.name for f in dataclasses.fields(SplitInfo)}
        shard_fields = {f.name for f in dataclasses.fields(ShardInfo)}
        splits = {}
        for name, split in data["splits"].items():
            split = {k: v for k, v in split.items() if k in split_fields}
            split["shards"] = [ShardInfo(**{k: v for k, v in s.items() if k in shard_fields}) for s in split["shards"]]
            splits[name] = SplitInfo(**split)
        data["splits"] = splits
        data["side_files"] = {kind: SideFile(**{k: v for k, v in entry.items() if k in _SIDE_FILE_FIELDS})
                              for kind, entry in data.get("side_files", {}).items()}
        return cls(**data)


_SECTIONS = {"model": ModelSection, "tokenizer": TokenizerSection, "dataset": DatasetSection,
             "storage": StorageSection, "extraction": ExtractionSection}
"""The manifest's typed sections, by key."""
_SIDE_FILE_FIELDS = {f.name for f in dataclasses.fields(SideFile)}


def confined_path(cache_dir: str | os.PathLike, relative: str, what: str = "Shard") -> Path:
    """``cache_dir / relative``, refused unless it resolves inside ``cache_dir`` (symlinks followed).

    The schema already allows only ``<split>/shard-NNNNN.h5``; this catches a split folder or a
    shard that is a symlink leading out of the cache, or a loop of links (a split folder linking to
    itself), before anything reads through it. Writes check more strictly
    (:class:`~layercache.core.confine.OwnedFolder`: no link at all).
    """
    full = Path(cache_dir) / relative
    try:
        root = Path(cache_dir).resolve()
        resolved = full.resolve()
    except (RuntimeError, OSError) as err:  # RuntimeError: a loop of links (Python < 3.13)
        why = "a loop of symbolic links" if isinstance(err, RuntimeError) else (err.strerror or str(err))
        raise CacheError(f"{what} {full} cannot be reached ({why}); replace the link with the real folder or "
                         "file, or re-extract the cache.") from None
    if resolved != root and root not in resolved.parents:
        raise CacheError(f"{what} {full} leads outside the cache folder (to {resolved}); layercache reads and "
                         "deletes only inside its cache, so replace the link with the real file or re-extract.")
    return full


def manifest_path(cache_dir: str | os.PathLike) -> Path:
    """``<cache_dir>/manifest.json``."""
    return Path(cache_dir) / MANIFEST_NAME


def write_manifest(cache_dir: str | os.PathLike, manifest: Manifest) -> None:
    """Write the manifest atomically: a reader sees the old or the new file, never a mix.

    The file gets the permissions of any new file (``0666`` less the umask), the same as the
    shards, so a cache shared by a team can be opened by everyone who can read its shards;
    ``mkstemp`` alone would leave it ``0600`` (:func:`~layercache.core.files.write_text_atomic`).
    The file is written inside the real cache folder, never through a link
    (:class:`~layercache.core.confine.OwnedFolder`): a ``manifest.json`` that is a link or a FIFO
    is refused with :class:`~layercache.errors.UnsafePathError`.
    """
    manifest.updated_at = utc_now()
    target = OwnedFolder.at(cache_dir).file(MANIFEST_NAME)
    text = json.dumps(manifest.to_json(), indent=2, sort_keys=False)
    write_text_atomic(target, text)


def load_manifest_json(cache_dir: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a folder, refused unless layercache wrote it (it may still be damaged).

    A missing, unreadable or non-JSON file, and a JSON file that is not a layercache manifest
    (:func:`~layercache.store.schema.foreign_manifest_problem`), are a :class:`CacheError`; whether
    the content is valid is :func:`read_manifest`'s question.
    """
    path = manifest_path(cache_dir)
    if not os.path.lexists(path):
        raise CacheError(
            f"{cache_dir} is not a layercache cache (no {MANIFEST_NAME}); "
            "point to a folder written by `layercache extract`."
        )
    try:
        confined_path(cache_dir, MANIFEST_NAME, "The manifest")
        check_regular_file(path, "manifest")  # a FIFO would block the read
    except UnsafePathError as err:
        raise CacheError(str(err)) from None
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON or bad UTF-8
        raise CacheError(f"The manifest {path} cannot be read ({_short(err)}), so layercache cannot tell that it "
                         "wrote this folder; move or delete the folder yourself and extract again.") from None
    problem = foreign_manifest_problem(data)
    if problem is not None:
        raise CacheError(f"{cache_dir} is not a layercache cache: its {MANIFEST_NAME} {problem}; point to a "
                         "folder written by `layercache extract`.")
    return data


def read_manifest(cache_dir: str | os.PathLike) -> Manifest:
    """Read and validate ``manifest.json``; a missing, unreadable, foreign or invalid one is a :class:`CacheError`."""
    path = manifest_path(cache_dir)
    data = load_manifest_json(cache_dir)
    try:
        return Manifest.from_json(data)
    except ManifestSchemaError as err:
        raise CacheError(f"The manifest {path} is damaged: {err}; re-extract the cache "
                         f"({call('extract', overwrite=True)}).") from None


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:120] if text else type(err).__name__
