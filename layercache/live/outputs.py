"""Where live predictions and bundles are written: checked before any work, written whole, never through a link.

``predict --out FILE`` names a file in a folder layercache does not own, so the rules are those of
:mod:`~layercache.core.confine` applied to that one file:

- it is checked before anything is read or computed (:func:`check_output_file`): a path that is
  one of the files the command reads (the input file, a run's config or weights; the same inode,
  so a hard link counts) is refused, as is any path inside a folder a run, cache or backbone of
  the command owns (:mod:`.guarded`), a folder, a symbolic link, a FIFO or another special file in
  its place, a folder path that runs through a file (ENOTDIR) and a folder that cannot be written
  (read-only, no permission), each in one sentence;
- it is written atomically (:func:`write_lines`: a temporary file beside it, renamed over it), so
  a reader sees the old file or the new one, and a link planted in its place is replaced, never
  followed. The folders above the file may be links the user chose: they are resolved once.

:func:`bundle_folder` gives :meth:`~layercache.live.bundle.LiveBundle.save_pretrained` the same
guarantees for a bundle folder: its ``heads/NN`` folders real folders below it, its files absent
or regular files.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..core.confine import OwnedFolder, kind_of, lstat_or_none
from ..core.files import why_unwritable, write_text_atomic
from ..core.option_names import option
from ..errors import ConfigError, OutputWriteError, UnsafePathError
from .guarded import Guarded, refuse_guarded


def check_output_file(path: str | os.PathLike, reads: Iterable[str | os.PathLike] = (), *,
                      guarded: Iterable[Guarded] = (), keyword: str = "out") -> Path:
    """``path`` as a file layercache may replace, refused in one sentence before any work starts.

    ``reads``: the files the command reads (an existing one that is the same file as ``path`` is
    refused: writing there would destroy the input); ``guarded``: the folders of the runs, caches and
    backbone it reads or owns, never written into (:mod:`.guarded`); ``keyword``: the option that names it.
    Returns the path with ``~`` expanded.
    """
    target = Path(path).expanduser()
    named = option(keyword, path)
    if str(path).endswith(("/", os.sep)) or target.name in ("", ".", ".."):
        raise ConfigError(f"{named} names a folder; give a file path, e.g. {option(keyword, 'predictions.jsonl')}.")
    st = _lstat(target, named)
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(f"{named} is a symbolic link, and layercache never writes through a link "
                                  "(it could replace a file elsewhere); give the real file path, or another name.")
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{named} is a folder; give a file path inside it, e.g. "
                              f"{option(keyword, target / 'predictions.jsonl')}.")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{named} is {kind_of(st)}, not a regular file; give a file path.")
        for read in reads:
            other = _stat_quietly(read)
            if other is not None and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                same = "" if Path(read) == target else f" (the same file as {read})"
                raise ConfigError(f"{named} is a file this command reads{same}: writing the output there "
                                  f"would destroy it; choose another {option(keyword)} file.")
    refuse_guarded(target, path, guarded, keyword)
    _check_folder_writable(target, keyword)
    return target


def write_lines(path: str | os.PathLike, lines: Sequence[str], *, keyword: str = "out") -> Path:
    """Write ``lines`` (each ending with a newline) to ``path`` in one atomic step; returns the file written.

    Missing folders above it are created. The file is never opened through a link nor as a FIFO:
    it is written beside and renamed into place.
    """
    target = Path(path).expanduser()
    try:
        folder = OwnedFolder.at(target.parent, "output folder")
        folder.check_root(create=True)
        final = folder.file(target.name)
        write_text_atomic(final, "".join(lines))
    except OSError as err:
        raise unwritable(option(keyword, path), err) from None
    return final


def bundle_folder(folder: str | os.PathLike) -> OwnedFolder:
    """The bundle folder ``folder`` as an owned folder, created, refused when a file or special file stands there."""
    owned = OwnedFolder.at(folder, "bundle folder")
    try:
        owned.check_root(create=True)
    except OSError as err:
        raise unwritable(f"The bundle folder {folder}", err) from None
    return owned


def unwritable(what: str, err: OSError) -> OutputWriteError:
    """One sentence for an ``OSError`` met writing a path; ``what`` names it (``--out FILE``, ``The bundle folder
    FOLDER``)."""
    why = why_unwritable(err)
    return OutputWriteError(f"{what} cannot be written ({why}); choose a path in a folder you can write.")


def _lstat(path: Path, named: str) -> os.stat_result | None:
    try:
        return lstat_or_none(path)
    except OSError as err:  # a name too long, a loop of links above it, a folder without permission
        raise unwritable(named, err) from None


def _stat_quietly(path: str | os.PathLike) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _check_folder_writable(target: Path, keyword: str) -> None:
    """Refuse a path whose nearest existing folder is a file or takes no new file (probed with a temporary one)."""
    above = target.parent
    while True:
        try:
            st = os.stat(above)
        except FileNotFoundError:
            if above.parent == above:
                raise OutputWriteError(f"{option(keyword, target)}: none of its folders exists; give a path in an "
                                       "existing folder.") from None
            above = above.parent
            continue
        except OSError as err:  # ENOTDIR: a file somewhere above; a loop; no permission to look
            raise unwritable(option(keyword, target), err) from None
        break
    if not stat.S_ISDIR(st.st_mode):
        raise OutputWriteError(f"{option(keyword, target)} cannot be written: {above} is {kind_of(st)}, not a folder; "
                               "give a path in a folder.")
    try:  # os.access ignores read-only mounts for some users and every permission for root: try it for real
        fd, probe = tempfile.mkstemp(prefix=".layercache-probe-", dir=above)
    except OSError as err:
        raise unwritable(option(keyword, target), err) from None
    os.close(fd)
    os.unlink(probe)
