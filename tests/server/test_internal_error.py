"""An exception nothing caught still answers in OpenAI's error shape (responses.internal_error)."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.server.core.responses import internal_error
from tests.conftest import serve


async def boom(_request: Request) -> Response:
    raise RuntimeError("secret detail sk-XYZ")


def test_uncaught_exception_is_an_openai_shaped_500() -> None:
    app = Starlette(routes=[Route("/", boom)], exception_handlers={Exception: internal_error})
    with serve(app) as url:
        answer = httpx.get(url + "/", timeout=5)
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"] == {
        "message": "The proxy failed to handle the request.",
        "type": "api_error",
        "param": None,
        "code": "internal_error",
    }
    assert "sk-XYZ" not in answer.text and "RuntimeError" not in answer.text
