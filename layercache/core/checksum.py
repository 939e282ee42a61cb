"""Shard checksums: detect a shard file that changed after it was committed.

Each committed shard is listed in the manifest with ``"<algorithm>:<hex digest>"`` of its
bytes. The algorithm is XXH3-128, not sha256: the checksum guards against torn writes, disk
errors and truncated copies, not against an adversary, and it is computed for every shard
inside the extraction loop, where an order of magnitude in hashing speed is time the loop waits
(measured in ``benchmarks/README.md``). The algorithm name travels with the digest, so a later
format can change it without ambiguity. Model fingerprints hash weight files with the same
function.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import xxhash

ALGORITHM = "xxh3_128"
_READ_BLOCK = 1 << 22


def file_checksum(path: str | os.PathLike) -> str:
    """``"xxh3_128:<hex>"`` of a file's bytes, read into one reused buffer."""
    digest = xxhash.xxh3_128()
    buffer = bytearray(_READ_BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while n := handle.readinto(buffer):
            digest.update(view[:n])
    return f"{ALGORITHM}:{digest.hexdigest()}"


def fsync_and_checksum(path: str | os.PathLike) -> str:
    """Flush ``path`` to disk and return its checksum, the two at once.

    The checksum reads the file back from the page cache while the disk writes it; both release
    the GIL, so this takes about as long as the fsync alone.
    """
    with open(path, "rb+") as handle, ThreadPoolExecutor(1, thread_name_prefix="layercache-fsync") as pool:
        synced = pool.submit(os.fsync, handle.fileno())
        digest = file_checksum(path)
        synced.result()  # re-raises an fsync error
    return digest


def checksum_matches(path: str | os.PathLike, expected: str) -> bool:
    """Whether the file at ``path`` exists and still has checksum ``expected`` (as the manifest lists it)."""
    algorithm = expected.partition(":")[0]
    if algorithm != ALGORITHM:
        raise ValueError(f"unknown checksum algorithm {algorithm!r} (this layercache knows {ALGORITHM!r})")
    return Path(path).is_file() and file_checksum(path) == expected
