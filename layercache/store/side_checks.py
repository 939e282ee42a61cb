"""What is checked of a cache's side files (``manifest.side_files``: the vocabulary, the lens, the projection).

Each side file the manifest lists must be a regular file inside the cache whose bytes have the
checksum the manifest recorded. A link is a problem even where it points at the right bytes:
extraction writes only real files in the cache, and ``--repair`` replaces the link. Asked for
explicitly (``layercache info --check``, a resume, ``--repair``); each reader checks its own file
when it reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.checksum import file_problem
from .manifest import Manifest, SideFile


def side_file_problem(cache_dir: str | os.PathLike, entry: SideFile) -> str | None:
    """Why the side file ``entry`` names is not the one extraction wrote (None when it is): ``missing``,
    ``is a symbolic link, not a regular file``, ``cannot be read (...)``, ``changed since extraction``."""
    return file_problem(Path(cache_dir) / entry.file, entry.checksum, follow_links=False)


def side_file_problems(cache_dir: str | os.PathLike, manifest: Manifest) -> dict[str, str]:
    """Every listed side file that is not as extraction wrote it: file name -> what is wrong with it."""
    found = {entry.file: side_file_problem(cache_dir, entry) for entry in manifest.side_files.values()}
    return {file: problem for file, problem in found.items() if problem is not None}
