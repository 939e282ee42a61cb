"""Where caches live when the user gives no path, and which cache is "the latest".

Without ``--out`` a cache goes to ``$LAYERCACHE_HOME/<model>__<dataset>[__<config>]``;
``LAYERCACHE_HOME`` defaults to ``$XDG_CACHE_HOME/layercache`` (``~/.cache/layercache``). Every
extraction records its folder in ``$LAYERCACHE_HOME/latest``, so later commands can take the
cache as an optional argument.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import CacheError

LATEST_FILE = "latest"


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
    parts = [slug(model_name), slug(dataset_name)] + ([slug(config)] if config else [])
    return cache_home() / "__".join(parts)


def record_latest(cache_dir: Path) -> None:
    """Remember ``cache_dir`` as the most recently written cache (best effort)."""
    home = cache_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
        tmp = home / f".{LATEST_FILE}.{os.getpid()}"
        tmp.write_text(str(Path(cache_dir).resolve()) + "\n")
        os.replace(tmp, home / LATEST_FILE)
    except OSError:
        pass  # an unwritable home only costs the default; the cache itself is fine


def latest_cache() -> Path | None:
    pointer = cache_home() / LATEST_FILE
    if not pointer.is_file():
        return None
    return Path(pointer.read_text().strip())


def resolve_cache_path(path: str | os.PathLike | None) -> Path:
    """The cache folder to use: ``path`` if given, else the most recently written cache."""
    if path is not None:
        path = Path(path).expanduser()
        if not path.exists():
            raise CacheError(f"No cache at {path}; check the path or run `layercache extract` first.")
        return path
    latest = latest_cache()
    if latest is None or not latest.exists():
        raise CacheError(
            "No cache given and no recent cache found; pass a cache folder or run `layercache extract` first."
        )
    return latest
