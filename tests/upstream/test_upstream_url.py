"""Passthrough URLs: whatever the client's path, the request stays on the upstream's host and path."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fault_upstream import FaultUpstream


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


@pytest.fixture
def evil() -> Iterator[FaultUpstream]:
    """A host no request must ever reach."""
    with FaultUpstream().running() as server:
        yield server


def raw_request(port: int, target: bytes) -> int:
    """Send a request line verbatim (httpx would normalize it); the status, 0 if none."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def crafted(evil: str) -> list[bytes]:
    """Paths that try to name another host or climb out of the base path, in many encodings."""
    host, port = evil.split(":")
    targets = [
        f"/v1%2F@{evil}/x",
        f"/v1%2f@{evil}/v1/models",
        f"/v1%40{evil}/x",
        f"/v1@{evil}/x",
        f"/v1:{port}@{host}:{port}/x",
        f"/v1%3A{port}%40{evil}/x",
        f"/v1/@{evil}/x",
        f"/v1/%40{evil}/x",
        f"/v1//{evil}/x",
        f"/v1/%2F%2F{evil}/x",
        f"/v1\\\\{evil}/x",
        f"/v1/\\\\{evil}/x",
        f"/v1%5C%5C{evil}/x",
        f"/v1/..%2F..%2F@{evil}/x",
        "/v1/../../admin",
        "/v1/%2e%2e/%2e%2e/admin",
        "/v1/%252e%252e/admin",
        "/v1/.%2e/admin",
        f"/v1#@{evil}/x",
        f"/v1/models?x=1#@{evil}/",
        f"/v1%23@{evil}/x",
        f"/v1/x?@{evil}/y",
    ]
    encoded = [t.encode() for t in targets]
    encoded += [
        b"/v1\xef\xbc\x8f@" + evil.encode() + b"/x",  # fullwidth solidus
        b"/v1\xe2\x88\x95" + evil.encode() + b"/x",  # division slash
        b"/v1/\xc0\xaf..\xc0\xafadmin",
        b"/v1\xff@" + evil.encode() + b"/x",
    ]
    return encoded


@pytest.mark.parametrize("with_path", [False, True], ids=["base-without-path", "base-with-path"])
def test_client_path_never_picks_the_host(
    start_proxy: Any, fault: FaultUpstream, evil: FaultUpstream, with_path: bool
) -> None:
    base = fault.url if with_path else fault.base
    prefix = "/v1/" if with_path else "/"
    proxy = start_proxy(upstream=base)
    port = int(proxy.url.rsplit(":", 1)[1])
    escaped: list[str] = []
    for target in crafted(f"127.0.0.1:{evil.port}"):
        before = len(fault.requests)
        status = raw_request(port, target)
        if len(fault.requests) > before:
            sent = fault.requests[-1].target
            if not sent.startswith(prefix) or "/../" in sent or sent.endswith("/.."):
                escaped.append(f"{target!r} -> {sent}")
        else:
            assert status < 500, (target, status)  # refused, or a redirect of our own
    assert evil.conns == [], "a client path sent a request to another host"
    assert not escaped, f"paths escaped the base path: {escaped}"


def test_plain_paths_still_forwarded(start_proxy: Any, fault: FaultUpstream) -> None:
    proxy = start_proxy(upstream=fault.base)
    port = int(proxy.url.rsplit(":", 1)[1])
    assert raw_request(port, b"/v1/models?limit=2&after=a%40b") == 200
    assert fault.requests[-1].target == "/models?limit=2&after=a%40b"
    proxy2 = start_proxy(upstream=fault.url + "/")
    port2 = int(proxy2.url.rsplit(":", 1)[1])
    assert raw_request(port2, b"/v1/files/file-1%2Fx/content") == 200
    assert fault.requests[-1].target == "/v1/files/file-1%2Fx/content"
