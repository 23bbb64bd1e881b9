"""Security: keys stay secret, credentials are never logged, no request can steer the upstream."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.policy.model import hash_key
from tests.conftest import RunningProxy, free_port
from tests.fault_upstream import FaultUpstream, usage_rows, wait_until
from tests.processes import healthy, serve_command

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
STREAM = dict(SMALL, stream=True)
PROXY_KEY = "cp-team-PROXYKEY-4f1d2c"
ADMIN_KEY = "cp-admin-ADMINKEY-9a8b7c"
WRONG_KEY = "cp-team-WRONGKEY-000111"
UPSTREAM_SECRET = "sk-upstream-UPSTREAMSECRET-5e6f"
COOKIE_SECRET = "session=COOKIESECRET-77aa"
API_KEY_SECRET = "APIKEYHEADERSECRET-1234"
X_API_KEY_SECRET = "XAPIKEYHEADERSECRET-5678"
QUERY_SECRET = "QUERYSECRET-abcd"
SECRETS = (
    PROXY_KEY,
    ADMIN_KEY,
    WRONG_KEY,
    UPSTREAM_SECRET,
    COOKIE_SECRET,
    API_KEY_SECRET,
    X_API_KEY_SECRET,
    QUERY_SECRET,
)


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


@pytest.fixture
def evil() -> Iterator[FaultUpstream]:
    """A host no request must ever reach."""
    with FaultUpstream().running() as server:
        yield server


def key_mode_policies(folder: Path) -> None:
    (folder / "default.yaml").write_text(f'admin_keys: ["{hash_key(ADMIN_KEY)}"]\n')
    (folder / "research.yaml").write_text(
        f'team: research\nkeys: ["{hash_key(PROXY_KEY)}"]\n'
        "upstream: {api_key_env: TEAM_UPSTREAM_KEY, timeout_s: 1}\n"
    )


def credential_headers(bearer: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {bearer}",
        "cookie": COOKIE_SECRET,
        "api-key": API_KEY_SECRET,
        "x-api-key": X_API_KEY_SECRET,
        "proxy-authorization": f"Basic {API_KEY_SECRET}",
    }


def test_no_secret_in_logs_responses_or_upstream_requests(
    tmp_path: Path, policies_dir: Path, fault: FaultUpstream
) -> None:
    """A real `proxy serve` at debug level, every kind of request and fault, then grep."""
    key_mode_policies(policies_dir)
    port, stderr_path = free_port(), tmp_path / "stderr.log"
    usage = tmp_path / "usage.jsonl"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [
                *serve_command(port, policies_dir, fault.url, usage),
                "--log-level",
                "debug",
            ],
            stdout=stderr,
            stderr=stderr,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "TEAM_UPSTREAM_KEY": UPSTREAM_SECRET},
        )
    url = f"http://127.0.0.1:{port}"
    responses: list[httpx.Response] = []
    try:
        assert wait_until(lambda: healthy(url), 20)
        good, bad = credential_headers(PROXY_KEY), credential_headers(WRONG_KEY)
        with httpx.Client(timeout=8) as client:
            for mode in (
                "ok",
                "garbage",
                "html_500",
                "429",
                "silent",
                "stream_reset",
                "plain_reset",
            ):
                for body in (SMALL, STREAM):
                    responses.append(
                        client.post(
                            url + "/v1/chat/completions",
                            json=body,
                            headers={**good, "x-fault": mode},
                        )
                    )
            responses.append(client.post(url + "/v1/chat/completions", json=SMALL, headers=bad))
            responses.append(
                client.post(url + "/v1/chat/completions", content=b"{bad json", headers=good)
            )
            responses.append(client.get(url + f"/v1/models?api_key={QUERY_SECRET}", headers=good))
            responses.append(client.get(url + f"/v1/models?api_key={QUERY_SECRET}", headers=bad))
            responses.append(client.post(url + "/v1/embeddings", content=b"x" * 1000, headers=good))
            responses.append(client.get(url + "/v1/models", headers={**good, "x-fault": "garbage"}))
            responses.append(client.get(url + "/metrics", headers=credential_headers(ADMIN_KEY)))
            responses.append(client.get(url + "/metrics", headers=bad))
            responses.append(
                client.post(
                    url + "/v1/context/plan", json=SMALL, headers=credential_headers(ADMIN_KEY)
                )
            )
            responses.append(client.post(url + "/v1/context/plan", json=SMALL, headers=good))
            responses.append(client.get(url + f"/nope?token={QUERY_SECRET}", headers=good))
        assert wait_until(lambda: len(usage_rows(usage, 0, 0)) >= 16)
        process.send_signal(signal.SIGTERM)
        fault.release()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    statuses = {r.status_code for r in responses}
    assert {200, 400, 401, 403, 429, 500, 502, 504} <= statuses  # the faults really happened
    log_text = stderr_path.read_text(errors="replace")
    assert log_text.strip(), "no log output at all: nothing was checked"
    usage_text = usage.read_text()
    for secret in SECRETS:
        assert secret not in log_text, f"{secret} in the proxy's log"
        assert secret not in usage_text, f"{secret} in the usage log"
    for response in responses:
        shown = response.content.decode(errors="replace") + str(response.headers.raw)
        for secret in (PROXY_KEY, ADMIN_KEY, WRONG_KEY, UPSTREAM_SECRET):
            assert secret not in shown, f"{secret} echoed by {response.request.url}"
    assert fault.requests, "nothing reached the upstream"
    for conn in fault.requests:
        sent = (
            orjson.dumps(conn.headers).decode() + conn.target + conn.body.decode(errors="replace")
        )
        for secret in (PROXY_KEY, ADMIN_KEY, WRONG_KEY):
            assert secret not in sent, f"{secret} sent upstream"
        assert conn.headers.get("authorization") == f"Bearer {UPSTREAM_SECRET}"
        assert "proxy-authorization" not in conn.headers


def key_proxy(
    start_proxy: Any, policies_dir: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> RunningProxy:
    monkeypatch.setenv("TEAM_UPSTREAM_KEY", UPSTREAM_SECRET)
    key_mode_policies(policies_dir)
    return start_proxy(upstream=upstream)  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_key_mode_forwards_no_client_credential_headers(
    start_proxy: Any,
    policies_dir: Path,
    fault: FaultUpstream,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """With proxy keys the client's credentials are for the proxy; only the team's key goes on."""
    proxy = key_proxy(start_proxy, policies_dir, fault.url, monkeypatch)
    response = httpx.post(
        proxy.url + path, json=SMALL, headers=credential_headers(PROXY_KEY), timeout=5
    )
    assert response.status_code == 200
    sent = fault.requests[-1].headers
    assert sent["authorization"] == f"Bearer {UPSTREAM_SECRET}"
    leaked = {
        name for name in ("cookie", "api-key", "x-api-key", "proxy-authorization") if name in sent
    }
    assert not leaked, (
        f"client credential headers reached the upstream in key mode: {sorted(leaked)}"
    )


@pytest.mark.parametrize(
    "base_url",
    ["http://no-such-host.invalid/v1", f"http://user:{UPSTREAM_SECRET}@no-such-host.invalid/v1"],
    ids=["plain", "userinfo"],
)
def test_upstream_key_is_not_echoed_in_errors(
    start_proxy: Any,
    policies_dir: Path,
    fault: FaultUpstream,
    monkeypatch: pytest.MonkeyPatch,
    base_url: str,
) -> None:
    """An unreachable team upstream: a clean 502 naming neither the key nor the address."""
    monkeypatch.setenv("TEAM_UPSTREAM_KEY", UPSTREAM_SECRET)
    key_mode_policies(policies_dir)
    (policies_dir / "research.yaml").write_text(
        f'team: research\nkeys: ["{hash_key(PROXY_KEY)}"]\n'
        f'upstream: {{api_key_env: TEAM_UPSTREAM_KEY, timeout_s: 0.5, base_url: "{base_url}"}}\n'
    )
    proxy = start_proxy(upstream=fault.url)
    headers = {"authorization": f"Bearer {PROXY_KEY}"}
    for path, body in (
        ("/v1/chat/completions", SMALL),
        ("/v1/chat/completions", STREAM),
        ("/v1/embeddings", SMALL),
    ):
        response = httpx.post(proxy.url + path, json=body, headers=headers, timeout=8)
        assert UPSTREAM_SECRET not in response.text and "no-such-host" not in response.text
        assert response.status_code == 502, (path, response.text[:200])
        assert response.json()["error"]["type"] == "upstream_error"
    assert fault.conns == []  # the configured (if unreachable) host, never the server default


def raw_get(port: int, target: str, host: str, headers: dict[str, str]) -> bytes:
    """A request line sent verbatim: httpx would normalize these targets away."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def steering_targets(evil: str) -> list[str]:
    return [
        f"/v1/..%2F..%2Fhttp:%2F%2F{evil}%2Fx",
        f"/v1//{evil}/x",
        f"/v1/%2F%2F{evil}/x",
        f"/v1/@{evil}/x",
        f"//{evil}/v1/models",
        f"http://{evil}/v1/models",  # absolute-form request target
        f"/v1/models?url=http://{evil}/",
        "/v1/../../admin",
        "/v1/..%2F..%2Fadmin",
        "/v1/%2e%2e/%2e%2e/admin",
        "/v1/%252e%252e/%252e%252e/admin",
    ]


def test_no_path_or_host_steers_the_upstream(
    start_proxy: Any,
    policies_dir: Path,
    fault: FaultUpstream,
    evil: FaultUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = key_proxy(start_proxy, policies_dir, fault.url, monkeypatch)
    port = int(proxy.url.rsplit(":", 1)[1])
    evil_host = f"127.0.0.1:{evil.port}"
    escaped: list[str] = []
    for target in steering_targets(evil_host):
        before = len(fault.requests)
        answer = raw_get(
            port,
            target,
            evil_host,
            {"authorization": f"Bearer {PROXY_KEY}", "x-forwarded-host": evil_host},
        )
        status = int(answer.split(b" ", 2)[1])
        if len(fault.requests) > before:
            sent = fault.requests[-1]
            # Only ever under the configured base path (/v1): `..` must not climb out of it.
            if not sent.target.startswith("/v1/"):
                escaped.append(f"{target} -> {sent.target}")
        else:
            assert 400 <= status < 500, (target, answer[:200])
    assert evil.conns == [], "a request reached another host"
    assert not escaped, f"paths escaped the upstream base path: {escaped}"


def test_body_fields_do_not_steer_the_upstream(
    start_proxy: Any,
    policies_dir: Path,
    fault: FaultUpstream,
    evil: FaultUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = key_proxy(start_proxy, policies_dir, fault.url, monkeypatch)
    elsewhere = f"http://127.0.0.1:{evil.port}/v1"
    body = dict(
        SMALL,
        base_url=elsewhere,
        api_base=elsewhere,
        url=elsewhere,
        x_context={"base_url": elsewhere},
    )
    response = httpx.post(
        proxy.url + "/v1/chat/completions",
        json=body,
        timeout=5,
        headers={
            "authorization": f"Bearer {PROXY_KEY}",
            "x-forwarded-host": f"127.0.0.1:{evil.port}",
            "host": f"127.0.0.1:{evil.port}",
        },
    )
    assert response.status_code in (200, 400)
    assert evil.conns == []


def test_admin_keys_guard_metrics_and_plan(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    (policies_dir / "default.yaml").write_text(f'admin_keys: ["{hash_key(ADMIN_KEY)}"]\n')
    proxy = start_proxy(upstream=fault.url)
    for method, path, body in (("GET", "/metrics", None), ("POST", "/v1/context/plan", SMALL)):
        for headers in ({}, {"authorization": f"Bearer {WRONG_KEY}"}, {"authorization": ADMIN_KEY}):
            denied = httpx.request(method, proxy.url + path, json=body, headers=headers)
            assert denied.status_code == 403, (path, headers)
            assert denied.json()["error"]["code"] == "forbidden"
            assert WRONG_KEY not in denied.text and ADMIN_KEY not in denied.text
        allowed = httpx.request(
            method, proxy.url + path, json=body, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        )
        assert allowed.status_code == 200, path
    assert fault.conns == []
    # Admin keys alone do not switch on key mode: chat still works without a key.
    assert httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, timeout=5).status_code == 200


def test_admin_keys_in_key_mode(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = key_proxy(start_proxy, policies_dir, fault.url, monkeypatch)
    team = {"authorization": f"Bearer {PROXY_KEY}"}
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    assert httpx.get(proxy.url + "/metrics", headers=team).status_code == 403
    assert httpx.get(proxy.url + "/metrics", headers=admin).status_code == 200
    assert httpx.post(proxy.url + "/v1/context/plan", json=SMALL, headers=team).status_code == 403
    planned = httpx.post(proxy.url + "/v1/context/plan?team=research", json=SMALL, headers=admin)
    assert planned.status_code == 200 and planned.headers["x-context-policy"] == "research"
    # An admin key is not a team key.
    assert (
        httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, headers=admin).status_code == 401
    )


def test_metrics_in_key_mode_need_an_admin_key_even_when_none_is_listed(
    start_proxy: Any, policies_dir: Path
) -> None:
    """/metrics names every team: with proxy keys and no admin key listed, nobody reads it
    (a clear 403) until a policy lists one or says `metrics: public`."""
    team = f'team: research\nkeys: ["{hash_key(PROXY_KEY)}"]\n'
    (policies_dir / "research.yaml").write_text(team)
    proxy = start_proxy()
    for headers in ({}, {"authorization": f"Bearer {PROXY_KEY}"}):
        r = httpx.get(proxy.url + "/metrics", headers=headers)
        assert r.status_code == 403 and "admin_keys" in r.json()["error"]["message"]
        assert b"research" not in r.content
    (policies_dir / "research.yaml").write_text(team + "metrics: public\n")
    public = start_proxy()
    assert httpx.get(public.url + "/metrics").status_code == 200
