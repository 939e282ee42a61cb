"""Every digest layercache takes: shard checksums, and the fingerprints that tell content apart.

Each committed shard is listed in the manifest with ``"<algorithm>:<hex digest>"`` of its
bytes. The algorithm is XXH3-128, not sha256: the checksum guards against torn writes, disk
errors and truncated copies, not against an adversary, and it is computed for every shard
inside the extraction loop, where an order of magnitude in hashing speed is time the loop waits
(measured in ``benchmarks/README.md``). The algorithm name travels with the digest, so a later
format can change it without ambiguity. Model fingerprints hash weight files with the same
function.

Fingerprints of content (a dataset's rows, a tokenizer, the built-in task set, a run's
configuration) are :func:`json_sha256` of a JSON payload; local data files by
:func:`file_sha256`. They are compared, not verified at speed, and caches on disk hold them, so
they keep the digest they were first written with.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import xxhash

from .confine import kind_of

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


def data_checksum(data: bytes) -> str:
    """``"xxh3_128:<hex>"`` of bytes in memory: the same digest :func:`file_checksum` gives a file of those bytes.

    For a small file read whole, so the bytes checked are the bytes used.
    """
    return f"{ALGORITHM}:{xxhash.xxh3_128(data).hexdigest()}"


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


def file_problem(path: str | os.PathLike, checksum: str, *, follow_links: bool = True) -> str | None:
    """Why the file at ``path`` is not the one whose ``checksum`` was recorded (None when its bytes match).

    ``missing``, ``is a FIFO (named pipe), not a regular file`` ..., ``cannot be read (Permission
    denied)`` or ``changed since extraction``. Nothing that is not a regular file is opened (a FIFO
    would block); with ``follow_links=False`` a link is a problem itself (``is a symbolic link ...``),
    whatever it points at. Reads the whole file.
    """
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except (OSError, RuntimeError) as err:
        return f"cannot be reached ({err.strerror if isinstance(err, OSError) else 'a loop of symbolic links'})"
    if not stat.S_ISREG(st.st_mode):
        return f"is {kind_of(st)}, not a regular file"
    try:
        digest = file_checksum(path)
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    return None if digest == checksum else "changed since extraction"


def json_sha256(payload: Any, *, compact: bool = False) -> str:
    """SHA-256 hex digest of ``payload`` as JSON with sorted keys (a value JSON cannot hold as its ``str``).

    The one way layercache fingerprints content: datasets, tokenizers, the built-in task set and a
    run's configuration. ``compact`` drops the spaces after ``,`` and ``:``; the configuration hash
    has always been taken that way and the fingerprints the other, and both stay as they are
    because caches on disk hold digests of each form.
    """
    separators = (",", ":") if compact else None
    text = json.dumps(payload, sort_keys=True, separators=separators, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file's bytes (local data files' fingerprints; shards use :func:`file_checksum`)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
