"""Issue 26: one rule for the mode of every file layercache writes, whoever wrote its bytes.

``lens.safetensors`` and every run's ``weights.safetensors`` were ``0600`` while manifests followed the
umask: ``safetensors`` writes its own temporary file and renames it, so the mode set on the file
``write_file_atomic`` made was lost. The mode is now set on what lands.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def test_write_file_atomic_sets_the_mode_of_what_lands_whoever_wrote_it(tmp_path):
    from layercache.core.files import write_file_atomic

    def like_safetensors(tmp: Path) -> None:  # writes its own file, 0600, and renames it onto tmp
        own = tmp.with_name(tmp.name + ".own")
        own.write_bytes(b"weights")
        own.chmod(0o600)
        os.replace(own, tmp)

    previous = os.umask(0o002)
    try:
        write_file_atomic(tmp_path / "weights.safetensors", like_safetensors)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "weights.safetensors").stat().st_mode) == 0o664
    assert [p.name for p in tmp_path.iterdir()] == ["weights.safetensors"]
