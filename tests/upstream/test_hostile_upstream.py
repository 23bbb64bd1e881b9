"""Hostile upstreams: answers without end, endless streams, header values that are not Latin-1."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from proxy.errors import UpstreamTooLarge
from proxy.upstream.client import Timeouts, Upstream
from tests.fault_upstream import FaultUpstream

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


def test_whole_answer_is_capped(fault: FaultUpstream) -> None:
    fault.endless_bytes = 8 * 1024 * 1024

    async def main() -> None:
        upstream = Upstream(aiohttp.ClientSession(), max_answer_bytes=1024 * 1024)
        try:
            answer = await upstream.send(
                "GET",
                fault.url + "/x",
                [("x-fault", "endless_plain")],
                None,
                Timeouts(10, 5),
                streaming=False,
            )
            with pytest.raises(UpstreamTooLarge) as caught:
                await answer.read()
            assert caught.value.status == 502
            ok = await upstream.send("GET", fault.url + "/x", [], None, Timeouts(10, 5), False)
            assert b"fault upstream says hi" in await ok.read()
        finally:
            await upstream.close()

    asyncio.run(main())


def test_endless_plain_answer_gives_502_not_oom(start_proxy: Any, fault: FaultUpstream) -> None:
    fault.endless_bytes = 96 * 1024 * 1024  # past the 64 MiB cap, then it would stop
    proxy = start_proxy(upstream=fault.url)
    with httpx.Client(timeout=60) as client:
        answer = client.post(
            proxy.url + "/v1/chat/completions", json=SMALL, headers={"x-fault": "endless_plain"}
        )
        assert answer.status_code == 502, answer.text[:200]
        assert answer.json()["error"]["code"] == "upstream_response_too_large"
        assert client.post(proxy.url + "/v1/chat/completions", json=SMALL).status_code == 200


@pytest.mark.parametrize("mode", ["endless_stream", "endless_event"])
def test_endless_stream_is_relayed_and_the_proxy_survives(
    start_proxy: Any, fault: FaultUpstream, mode: str
) -> None:
    fault.endless_bytes = 24 * 1024 * 1024
    proxy = start_proxy(upstream=fault.url)
    body = dict(SMALL, stream=True)
    received = 0
    with httpx.Client(timeout=60) as client:
        with client.stream(
            "POST", proxy.url + "/v1/chat/completions", json=body, headers={"x-fault": mode}
        ) as answer:
            assert answer.status_code == 200
            for piece in answer.iter_raw():
                received += len(piece)
        assert received >= fault.endless_bytes
        assert client.post(proxy.url + "/v1/chat/completions", json=SMALL).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions"])
def test_header_values_that_are_not_latin1_never_give_500(
    start_proxy: Any, fault: FaultUpstream, path: str
) -> None:
    proxy = start_proxy(upstream=fault.url)
    headers = {"x-fault": "bad_headers"}
    if path.endswith("completions"):
        answer = httpx.post(proxy.url + path, json=SMALL, headers=headers, timeout=10)
    else:
        answer = httpx.get(proxy.url + path, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text[:200]
    assert answer.headers["x-fine"] == "yes"
    odd = answer.headers["x-odd"]
    assert odd.isascii() and "\r" not in odd and "%E2%98%83" in odd  # the snowman, encoded
    assert "keep-alive" not in {k.lower() for k in answer.headers if k.lower() != "connection"}
