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
    monkeypatch.setattr(memory, "_trim_seconds", 0.0)
    monkeypatch.setattr(memory, "TRIM_INTERVAL", 3600.0)
    for _ in range(100):
        memory.release_free_heap()
    assert calls == [0]


def test_without_malloc_trim_it_does_nothing(monkeypatch):
    monkeypatch.setattr(memory, "_TRIM", None)
    monkeypatch.setattr(memory, "_last_trim", float("-inf"))
    memory.release_free_heap()  # no error where the C library has no malloc_trim


def test_a_slow_trim_spaces_the_next_so_trimming_takes_a_bounded_share(monkeypatch):
    """A trim walks the whole heap (11 ms in a head's training here): at one every 0.1 s that was 4 % of the run."""
    clock = [1000.0]
    calls = []

    def slow_trim(pad):  # takes 10 ms of the fake clock
        calls.append(clock[0])
        clock[0] += 0.010

    monkeypatch.setattr(memory.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(memory, "_TRIM", slow_trim)
    monkeypatch.setattr(memory, "_last_trim", float("-inf"))
    monkeypatch.setattr(memory, "_trim_seconds", 0.0)
    for _ in range(2000):  # a block finished every 5 ms, for 10 s
        memory.release_free_heap()
        clock[0] += 0.005
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert len(calls) >= 10 and min(gaps) >= 0.010 / memory.TRIM_SHARE - 1e-9
    assert 0.010 * len(calls) <= memory.TRIM_SHARE * (clock[0] - 1000.0) * 1.05
