"""Manifest parts: what each writer of a cache has committed, until one merge step folds it into the manifest.

Several writers may fill one cache at once (ranks of a distributed extraction, or one process that
is its own only writer). Each owns a set of planned batches (its *share*) and writes only

- its own shards, each named after its first planned batch (``<split>/shard-NNNNN.h5``, NNNNN the
  batch number), so two writers never choose the same name and nobody has to hand out numbers, and
- its own part file, ``<cache>/manifest-part-KKKKK.json`` (K the writer), rewritten atomically
  after each shard it commits: the shard entries exactly as the manifest lists them.

``manifest.json`` is written by one step only, the merge (:func:`merge_parts`): it reads every
part, checks that each was written for this cache's configuration and that no two shards overlap,
lists the parts' shards in the manifest in batch order, writes the manifest, and only then deletes
the parts. A merge that is killed half-way leaves parts whose shards are already listed; the next
merge finds the same entries and drops them (the merge is idempotent). A run killed while writing
leaves parts behind; the next run merges them before it plans its work, so nothing committed is
lost, whatever number of writers the next run has.

A part is read as hostile input, like the manifest: a link, a FIFO or a file that fails its schema
is one :class:`~layercache.errors.CacheError` naming the file and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.confine import OwnedFolder, check_regular_file, lstat_or_none
from ..core.files import write_text_atomic
from ..core.option_names import option
from ..errors import CacheError, UnsafePathError
from .manifest import FORMAT_VERSION, Manifest, ShardInfo, confined_path, read_manifest, utc_now, write_manifest
from .schema import SHARD, ManifestSchemaError, Record, dict_of, integer, list_of, text, validate_manifest

PART_FILE = re.compile(r"manifest-part-(\d{5,})\.json")
"""The name of a writer's part file in the cache folder."""

_SHARD_FIELDS = {f.name for f in dataclasses.fields(ShardInfo)}
PART_SCHEMA = Record({"format_version": integer(), "config_hash": text(), "writer": integer(),
                      "splits": dict_of(list_of(SHARD))}, {"updated_at": text()})


def part_name(writer: int) -> str:
    """File name of writer ``writer``'s part: ``manifest-part-00003.json``."""
    return f"manifest-part-{writer:05d}.json"


@dataclass
class ManifestPart:
    """The shards one writer has committed, per split, in the order it committed them."""

    writer: int
    config_hash: str
    """The configuration the writer extracted with; a part of another configuration is never merged."""
    splits: dict[str, list[ShardInfo]] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    updated_at: str = field(default_factory=utc_now)

    def add(self, split: str, shard: ShardInfo) -> None:
        """Record a committed shard of ``split``."""
        self.splits.setdefault(split, []).append(shard)

    def to_json(self) -> dict:
        """The part as written to its file."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, where: str) -> "ManifestPart":
        """A part from parsed JSON, refused (``ManifestSchemaError``) unless it passes :data:`PART_SCHEMA`."""
        PART_SCHEMA(data, where)
        splits = {name: [ShardInfo(**{k: v for k, v in s.items() if k in _SHARD_FIELDS}) for s in shards]
                  for name, shards in data["splits"].items()}
        return cls(writer=data["writer"], config_hash=data["config_hash"], splits=splits,
                   format_version=data["format_version"], updated_at=data.get("updated_at", ""))


def write_part(cache_dir: str | os.PathLike, part: ManifestPart) -> None:
    """Rewrite the writer's part file atomically (inside the real cache folder, never through a link)."""
    part.updated_at = utc_now()
    target = OwnedFolder.at(cache_dir).file(part_name(part.writer))
    write_text_atomic(target, json.dumps(part.to_json(), indent=1))


def part_files(cache_dir: str | os.PathLike) -> list[Path]:
    """The part files in a cache folder, in writer order (links and other non-files included, to be refused)."""
    root = Path(cache_dir)
    try:
        names = [entry.name for entry in os.scandir(root) if PART_FILE.fullmatch(entry.name)]
    except FileNotFoundError:
        return []
    return [root / name for name in sorted(names)]


def read_parts(cache_dir: str | os.PathLike, manifest: Manifest) -> list[ManifestPart]:
    """Every part file of the cache, checked: a regular file, valid, of this cache's version and configuration."""
    parts = []
    for path in part_files(cache_dir):
        try:
            confined_path(cache_dir, path.name, "The manifest part")
            check_regular_file(path, "manifest part")
            data = json.loads(path.read_bytes())
            part = ManifestPart.from_json(data, path.name)
        except (UnsafePathError, OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON, bad schema
            why = err.args[0] if isinstance(err, (UnsafePathError, ManifestSchemaError)) else _short(err)
            raise CacheError(f"The manifest part {path} cannot be read ({why}); delete it (its shards are "
                             f"extracted again) or re-extract with {option('overwrite', True)}.") from None
        if part.format_version != FORMAT_VERSION or part.config_hash != manifest.config_hash:
            raise CacheError(f"The manifest part {path} was written by another layercache version or for another "
                             "configuration of this cache; delete it (its shards are extracted again) or "
                             f"re-extract with {option('overwrite', True)}.")
        if PART_FILE.fullmatch(path.name).group(1) != f"{part.writer:05d}":
            raise CacheError(f"The manifest part {path} names writer {part.writer}, not the one its file name "
                             "says; delete it (its shards are extracted again).")
        parts.append(part)
    return parts


def merge_parts(cache_dir: str | os.PathLike, manifest: Manifest) -> int:
    """Fold every part into ``manifest``, write it, then delete the parts; returns the shards newly listed.

    Shards are listed per split in batch order. An entry already in the manifest (a merge killed
    before it deleted its parts) is dropped; two entries that overlap, or a part naming a split the
    manifest does not plan, are refused: the cache was written by something else than this protocol.
    """
    parts = read_parts(cache_dir, manifest)
    if not parts:
        return 0
    added = fold_parts(manifest, parts, cache_dir)
    write_manifest(cache_dir, manifest)
    remove_parts(cache_dir)
    return added


def fold_parts(manifest: Manifest, parts: list[ManifestPart], cache_dir: str | os.PathLike) -> int:
    """List the parts' shards in ``manifest`` (in memory, in batch order); returns how many were new."""
    added = 0
    for part in parts:
        for name, shards in part.splits.items():
            if name not in manifest.splits:
                raise CacheError(f"The manifest part of writer {part.writer} lists shards of split {name!r}, which "
                                 f"this cache does not have; delete the part or re-extract with "
                                 f"{option('overwrite', True)}.")
            listed = {s.file: s for s in manifest.splits[name].shards}
            for shard in shards:
                known = listed.get(shard.file)
                if known is None:
                    manifest.splits[name].shards.append(shard)
                    added += 1
                elif known != shard:
                    raise CacheError(f"Shard {shard.file} is listed twice with different content (in the manifest "
                                     f"and in writer {part.writer}'s part); re-extract with "
                                     f"{option('overwrite', True)}.")
    for split in manifest.splits.values():
        split.shards.sort(key=lambda s: s.first_batch)
    if added:
        manifest.format_version = FORMAT_VERSION
    try:
        validate_manifest(manifest.to_json())  # overlapping shards, counts beyond the plan
    except ManifestSchemaError as err:
        raise CacheError(f"The manifest parts of {cache_dir} do not fit together ({err}); re-extract with "
                         f"{option('overwrite', True)}.") from None
    return added


def read_committed(cache_dir: str | os.PathLike) -> Manifest:
    """The manifest as the next merge will write it: its own shards and every writer's part's (nothing written).

    What ``layercache info`` shows of a cache whose writers were killed before a merge.
    """
    manifest = read_manifest(cache_dir)
    fold_parts(manifest, read_parts(cache_dir, manifest), cache_dir)
    return manifest


def remove_parts(cache_dir: str | os.PathLike) -> None:
    """Delete every part file (a link is removed itself, never followed)."""
    owner = OwnedFolder.at(cache_dir)
    for path in part_files(cache_dir):
        if lstat_or_none(path) is not None:
            owner.remove(path.name)


def _short(err: BaseException) -> str:
    text_ = str(err).strip().splitlines()
    return text_[0][:120] if text_ else type(err).__name__
