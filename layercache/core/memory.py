"""How much memory this process may still use: what readers that hold data across steps size themselves by."""

from __future__ import annotations

import os


def available_bytes() -> int | None:
    """Memory the system can give without swapping (Linux ``MemAvailable``), else free pages; None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
