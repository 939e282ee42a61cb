"""The hub probe (issue 36): one connection says whether the Hugging Face Hub can be reached, answered once.

No network is needed: the "hub" is a port on this machine, closed or listening.
"""

from __future__ import annotations

import socket

import pytest
from hub_support import closed_port, record_attempts

from layercache.core import hub_access
from layercache.core.hub_access import hub_unreachable


@pytest.fixture(autouse=True)
def nothing_remembered(monkeypatch):
    monkeypatch.setattr(hub_access, "_answers", {})
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_a_closed_port_is_unreachable_after_one_connection_and_is_remembered(monkeypatch):
    attempts = record_attempts(monkeypatch.setattr)
    port = closed_port()
    endpoint = f"http://127.0.0.1:{port}"
    assert hub_unreachable(endpoint) == f"connection refused by 127.0.0.1:{port}"
    assert hub_unreachable(endpoint + "/") == f"connection refused by 127.0.0.1:{port}"  # the same hub
    assert [kind for kind, _ in attempts] == ["lookup", "connect"]  # asked once, for both calls


def test_a_listening_hub_is_reachable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert hub_unreachable(f"http://127.0.0.1:{server.getsockname()[1]}") is None


def test_a_name_that_does_not_resolve_says_so(monkeypatch):
    def no_network(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    assert hub_unreachable("https://huggingface.co") == "the name huggingface.co does not resolve: no network?"


def test_behind_a_proxy_the_proxy_is_what_is_probed(monkeypatch):
    attempts = record_attempts(monkeypatch.setattr)
    port = closed_port()
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("no_proxy", "")
    assert hub_unreachable("https://hub.example") == f"connection refused by 127.0.0.1:{port}"
    assert ("connect", ("127.0.0.1", port)) in attempts
