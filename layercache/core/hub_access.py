"""Whether the Hugging Face Hub can be reached, asked with one short connection before the hub libraries ask.

Without a network, ``transformers`` and ``datasets`` retry every request with back-off, printing a line per
retry, and only then say what is missing: half a minute of noise before one sentence. So before a model or
dataset that is not on disk is loaded, :func:`hub_unreachable` opens one TCP connection to the hub's host
(or the proxy configured for it) with a short timeout. When it fails, the loaders read only what the local
Hugging Face cache holds (``HF_HUB_OFFLINE`` behaviour) and, when that is not enough, say so in one sentence
that names the fixes (a local folder or file, the built-in model or data, :data:`OFFLINE_TIP`). The answer
is kept for a minute, so one command asks once. A user who set ``HF_HUB_OFFLINE`` is never probed.

Only the connection is tried, never a request: a reachable hub that does not have the name answers at once
and the loaders' own sentence follows.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager

PROBE_S = 3.0
"""How long the connection (name lookup included) may take before the hub counts as unreachable."""
REMEMBER_S = 60.0
"""How long an answer stands: one command asks once, a long-lived process asks again later."""
DEFAULT_ENDPOINT = "https://huggingface.co"
OFFLINE_TIP = ("or download it where the hub is reachable, then HF_HUB_OFFLINE=1 reads it from the local cache "
               "without asking the hub")
"""The last fix a refusal without the hub names, after the local ones (a folder, a file, the built-in model)."""

_answers: dict[str, tuple[float, str | None]] = {}


def hub_unreachable(endpoint: str | None = None) -> str | None:
    """Why the hub at ``endpoint`` cannot be reached (``"connection refused by 127.0.0.1:9"``), or None.

    One connection per ``endpoint`` per :data:`REMEMBER_S`; a name lookup that hangs counts as no answer
    after :data:`PROBE_S`.
    """
    endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    now = time.monotonic()
    known = _answers.get(endpoint)
    if known is not None and now - known[0] < REMEMBER_S:
        return known[1]
    answer = _probe(*_address(endpoint))
    _answers[endpoint] = (now, answer)
    return answer


def _address(endpoint: str) -> tuple[str, int]:
    """The host and port a request to ``endpoint`` connects to first: its proxy's when one is configured."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        through = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if through.hostname:
            return through.hostname, through.port or 80
    return host, port


def _probe(host: str, port: int) -> str | None:
    """Connect to ``host:port`` once; why it failed, or None. A thread bounds the name lookup, which has no timeout."""
    answer: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=PROBE_S).close()
            answer.append(None)
        except OSError as err:
            answer.append(_why(err, host, port))

    worker = threading.Thread(target=connect, name="layercache-hub-probe", daemon=True)
    worker.start()
    worker.join(PROBE_S + 1)
    return answer[0] if answer else f"no answer from {host}:{port} within {PROBE_S:g} s"


def _why(err: OSError, host: str, port: int) -> str:
    if isinstance(err, socket.gaierror):
        return f"the name {host} does not resolve: no network?"
    if isinstance(err, ConnectionRefusedError):
        return f"connection refused by {host}:{port}"
    if isinstance(err, (socket.timeout, TimeoutError)):
        return f"no answer from {host}:{port} within {PROBE_S:g} s"
    return f"{host}:{port}: {err.strerror or err}"


@contextmanager
def cache_only(offline: bool = True):
    """With ``offline``: ``HF_HUB_OFFLINE`` behaviour for the body, then as before.

    ``huggingface_hub`` and ``datasets`` read the variable once, at import, into module constants; those are
    set for the body (the process's other threads see them too, while the hub cannot be reached anyway).
    """
    if not offline:
        yield
        return
    from huggingface_hub import constants

    owners = [constants, *([sys.modules["datasets"].config] if "datasets" in sys.modules else [])]
    before = [owner.HF_HUB_OFFLINE for owner in owners]
    for owner in owners:
        owner.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for owner, value in zip(owners, before):
            owner.HF_HUB_OFFLINE = value
