"""Where caches live when the user gives no path, and which cache is "the latest".

Without ``--out`` a cache goes to ``$LAYERCACHE_HOME/<model>__<dataset>[__<config>]``;
``LAYERCACHE_HOME`` defaults to ``$XDG_CACHE_HOME/layercache`` (``~/.cache/layercache``). Every
extraction records its folder in ``$LAYERCACHE_HOME/latest``, so later commands can take the
cache as an optional argument. The pointer is a file anyone can edit or damage, so it is read as
untrusted: anything but one absolute path of a cache folder is refused in one sentence that names
the pointer, never followed (an empty line would otherwise mean the current folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.files import write_text_atomic
from ..errors import CacheError

LATEST_FILE = "latest"
LATEST_MAX_BYTES = 8192
"""Longest pointer file read: a path is at most a few KiB (PATH_MAX is 4096 on Linux)."""


def cache_home() -> Path:
    """The folder that holds default caches and the ``latest`` pointer."""
    if env := os.environ.get("LAYERCACHE_HOME"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "layercache"


def slug(text: str) -> str:
    """A folder-safe short name: ``roberta-large``, ``sst2-train.tsv`` -> ``sst2-train``."""
    text = text.rstrip("/\\")
    base = Path(text).name if (os.sep in text or text.startswith(".")) else text.replace("/", "--")
    base = re.sub(r"\.(csv|tsv|jsonl|json|parquet|txt|conll)$", "", base)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-") or "data"


def default_cache_path(model_name: str, dataset_name: str, config: str | None = None) -> Path:
    """``<cache home>/<model>__<dataset>[__<config>]``, each part made folder-safe by :func:`slug`."""
    parts = [slug(model_name), slug(dataset_name)] + ([slug(config)] if config else [])
    return cache_home() / "__".join(parts)


def record_latest(cache_dir: Path) -> None:
    """Remember ``cache_dir`` as the most recently written cache (best effort)."""
    home = cache_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
        write_text_atomic(home / LATEST_FILE, str(Path(cache_dir).resolve()) + "\n", fsync=False)
    except OSError:
        pass  # an unwritable home only costs the default; the cache itself is fine


def latest_pointer() -> Path:
    """The file that names the most recent cache."""
    return cache_home() / LATEST_FILE


def latest_cache() -> Path | None:
    """The folder the ``latest`` pointer names, None when there is no pointer.

    A pointer that is not one absolute path (binary junk, empty, relative, several lines, too
    large, not a regular file) is a :class:`CacheError` naming the pointer; whether the folder is
    a cache is :func:`resolve_cache_path`'s check.
    """
    pointer = latest_pointer()
    if not os.path.lexists(pointer):
        return None

    def refuse(problem: str) -> CacheError:
        return CacheError(f"The latest-cache pointer {pointer} {problem}; pass a cache folder explicitly, or "
                          "delete the pointer (the next `layercache extract` writes it again).")

    if not pointer.is_file():  # a folder, a FIFO (which would block the read), a dangling link
        raise refuse("is not a regular file")
    try:
        with open(pointer, "rb") as handle:
            raw = handle.read(LATEST_MAX_BYTES + 1)
    except OSError as err:
        raise refuse(f"cannot be read ({err.strerror or err})") from None
    if len(raw) > LATEST_MAX_BYTES:
        raise refuse(f"is larger than {LATEST_MAX_BYTES} bytes, so it does not hold one folder path")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise refuse("is not text (it should hold one folder path)") from None
    if not text:
        raise refuse("is empty")
    if "\n" in text:
        raise refuse("holds more than one line (it should hold one folder path)")
    if not text.isprintable():
        raise refuse("holds control characters, not a folder path")
    path = Path(text)
    if not path.is_absolute():
        raise refuse(f"holds {text[:80]!r}, which is not an absolute path")
    return path


def resolve_cache_path(path: str | os.PathLike | None) -> Path:
    """The cache folder to use: ``path`` if given, else the most recently written cache."""
    if path is not None:
        path = Path(path).expanduser()
        if not path.exists():
            raise CacheError(f"No cache at {path}; check the path or run `layercache extract` first.")
        return path
    latest = latest_cache()
    if latest is None:
        raise CacheError(
            "No cache given and no recent cache found; pass a cache folder or run `layercache extract` first."
        )
    try:
        what = (None if (latest / "manifest.json").is_file() else
                "is not a layercache cache (no manifest.json)" if latest.exists() else "no longer exists")
    except OSError as err:  # e.g. a name too long for the file system
        what = f"cannot be checked ({err.strerror or err})"
    if what is not None:
        shown = str(latest) if len(str(latest)) <= 200 else str(latest)[:200] + "..."
        raise CacheError(f"No cache given, and the latest-cache pointer {latest_pointer()} names {shown}, which "
                         f"{what}; pass a cache folder, or run `layercache extract` (which rewrites the pointer).")
    return latest
