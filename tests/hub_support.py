"""A Hugging Face Hub that cannot be reached, without needing (or using) the network: its endpoint is a closed port
on this machine, and every attempt to reach anything is counted, so a test asserts how many were made, never how
long it took.

The test session runs with ``HF_HUB_OFFLINE=1`` (the root conftest), which skips the probe altogether;
:func:`unreachable_hub` undoes that for one test, the way a user without the variable runs: the hub libraries
read it (and ``HF_ENDPOINT``) at import, so their module constants are set, not the environment.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

COUNTING = """
import atexit, sys
sys.path.insert(0, sys.argv.pop(1))
from hub_support import record_attempts
attempts = record_attempts(setattr)
report = sys.argv.pop(1)
atexit.register(lambda: open(report, "w").write(repr(attempts)))
from layercache.cli import main
sys.argv[0] = "layercache"
main()
"""
"""``python -c COUNTING TESTS REPORT ARGS...``: ``layercache ARGS...`` with every name lookup and connection
written to REPORT at exit (TESTS: this folder)."""


_HELD: list[socket.socket] = []
"""The sockets behind :func:`closed_port`, kept bound for the session so that no one else gets their ports."""


def closed_port() -> int:
    """A port on 127.0.0.1 that refuses every connection at once: bound by this process, never listening, and held
    (so it cannot be handed to anything else while the tests run)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return sock.getsockname()[1]


def counting_command(report: Path, *args) -> list[str]:
    """The argv of a ``layercache`` process that writes its network attempts to ``report`` (read with
    :func:`attempts_in`)."""
    return [sys.executable, "-c", COUNTING, str(Path(__file__).parent), str(report), *[str(a) for a in args]]


def attempts_in(report: Path) -> list[tuple]:
    """The name lookups and connections a :func:`counting_command` made, in order."""
    import ast

    return ast.literal_eval(report.read_text())


def record_attempts(set_attribute) -> list[tuple]:
    """Record every name lookup and connection this process makes from now on (the list returned grows).

    ``set_attribute``: ``monkeypatch.setattr`` in a test (undone after it), ``setattr`` in a process of its own.
    """
    attempts: list[tuple] = []
    lookup, connect = socket.getaddrinfo, socket.socket.connect

    def counted_lookup(*args, **kwargs):
        attempts.append(("lookup", args[:2]))
        return lookup(*args, **kwargs)

    def counted_connect(self, address):
        attempts.append(("connect", address))
        return connect(self, address)

    set_attribute(socket, "getaddrinfo", counted_lookup)
    set_attribute(socket.socket, "connect", counted_connect)
    return attempts


def unreachable_hub(monkeypatch, hub_cache: Path | None = None) -> str:
    """For one test: not offline, the hub's endpoint a closed local port, no earlier answer of the probe remembered,
    and (``hub_cache``) the local Hugging Face cache there. Returns the endpoint."""
    import datasets
    from huggingface_hub import constants

    from layercache.core import hub_access

    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", endpoint)
    monkeypatch.setattr(hub_access, "_answers", {})
    if hub_cache is not None:
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    return endpoint


def cached_hub_model(hub_cache: Path, repo_id: str, folder: Path) -> Path:
    """``folder``'s files as the local Hugging Face cache holds a downloaded ``repo_id``: a snapshot whose files
    link to blobs, and ``refs/main`` naming it. Returns the snapshot folder."""
    import hashlib

    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for file in sorted(folder.iterdir()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snapshot
