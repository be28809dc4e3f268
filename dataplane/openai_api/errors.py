"""Every answer the front itself gives is an OpenAI-style JSON error object.

``{"error": {"message", "type", "param", "code"}}``, as the OpenAI API (and vLLM) answer, so
clients' error handling (the ``openai`` package raises ``BadRequestError``, ``NotFoundError``,
``APIStatusError`` by status) works unchanged. Engine answers are passed through as they are.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aiohttp only where a response is built: a router without the HTTP front,
    from aiohttp import web  # the picker's among them, never imports it (~0.2 s of CPU a start)

INVALID_REQUEST = "invalid_request_error"
NOT_FOUND = "not_found_error"
SERVER_ERROR = "server_error"
UNAVAILABLE = "service_unavailable_error"


class FrontError(Exception):
    """An error the front answers with (status, OpenAI-style body); nothing reached an engine."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        from aiohttp import web  # noqa: PLC0415 - see the module's imports

        body = {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }
        return web.Response(
            body=json.dumps(body, separators=(",", ":")).encode(),
            status=self.status,
            content_type="application/json",
            headers=headers,
        )


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> FrontError:
    return FrontError(400, message, param=param, code=code)
