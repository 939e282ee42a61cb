"""``release_free_heap`` hands the heap's free pages back to the OS (where the C library can), at a bounded rate."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layercache.core import memory

CHILD = textwrap.dedent("""
    import json
    from pathlib import Path

    from layercache.core import memory

    def anon():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024

    # 200 MiB in 100 KiB blocks (below glibc's mmap threshold, so on the heap), written so they are resident;
    # all but the last are freed: the heap cannot shrink from its top, and the holes stay resident.
    blocks = [bytearray(b"x" * (100 << 10)) for _ in range(2048)]
    last = blocks.pop()
    del blocks
    held = anon()
    memory.TRIM_INTERVAL = 0.0
    memory.release_free_heap()
    print(json.dumps({"held": held, "after": anon()}))
""")


@pytest.mark.skipif(memory._TRIM is None or not Path("/proc/self/status").exists(),
                    reason="needs glibc's malloc_trim and Linux /proc")
def test_free_heap_pages_go_back_to_the_os():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sizes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sizes["held"] - sizes["after"] > 150 << 20, sizes


def test_calls_closer_than_the_interval_do_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "_TRIM", lambda pad: calls.append(pad))
    monkeypatch.setattr(memory, "_last_trim", float("-inf"))
    monkeypatch.setattr(memory, "TRIM_INTERVAL", 3600.0)
    for _ in range(100):
        memory.release_free_heap()
    assert calls == [0]


def test_without_malloc_trim_it_does_nothing(monkeypatch):
    monkeypatch.setattr(memory, "_TRIM", None)
    monkeypatch.setattr(memory, "_last_trim", float("-inf"))
    memory.release_free_heap()  # no error where the C library has no malloc_trim
