"""What stands between a caller's bytes and the search service: body cap, content type, safe errors.

`BodyLimit` is the outermost ASGI layer: it counts body bytes as they arrive and answers 413 as
soon as the cap is passed, before anything parses the body or checks the API key, so an
unauthenticated caller can never make the process hold more than the cap. `check_json_values`
rejects what JSON can carry but Postgres, the tokenizer or a JSON encoder cannot (NUL, lone
surrogates, NaN and infinities, deep nesting), and `validation_error_body` renders a 422 that is
itself always encodable (no echo of the caller's input).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_JSON_DEPTH = 32
JSON_TYPES = ("application/json",)
# `curl -d` sends this type; the body is still the JSON the caller typed, so it is read as JSON.
FORM_TYPE = "application/x-www-form-urlencoded"


async def send_json(
    send: Send, status: int, detail: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """A complete JSON error response `{"detail": ...}` that also closes the connection."""
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BodyLimit:
    """ASGI middleware: at most `max_bytes` of request body are ever read; 413 the moment more arrive.

    It also makes a JSON body without a content type (or with curl's form default) read as JSON,
    and answers 415 naming the expected type for any other content type on a POST.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body over {self.max_bytes} bytes"
        headers = [(name.lower(), value) for name, value in scope["headers"]]
        length = next((value for name, value in headers if name == b"content-length"), None)
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await send_json(send, 400, "content-length: not an integer")
                return
            if declared > self.max_bytes:
                await send_json(send, 413, too_big)
                return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await send_json(send, 413, too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if scope["method"] in ("POST", "PUT", "PATCH") and body:
            content_type = next((v for n, v in headers if n == b"content-type"), b"").decode("latin-1")
            media = content_type.split(";")[0].strip().lower()
            if media in ("", FORM_TYPE):
                headers = [(n, v) for n, v in headers if n != b"content-type"]
                headers.append((b"content-type", b"application/json"))
                scope = {**scope, "headers": headers}
            elif media not in JSON_TYPES and not media.endswith("+json"):
                await send_json(
                    send, 415, f"content-type: {media!r} is not accepted; send the body as application/json"
                )
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def check_json_values(value: Any, where: str = "", depth: int = 0) -> None:
    """ValueError naming the field (`filters.lang`) for any value Postgres or a JSON encoder would refuse."""
    where = where or "body"
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{where}: contains a NUL character (\\u0000)")
        if not _encodable(value):
            raise ValueError(f"{where}: contains a lone surrogate (not valid Unicode text)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: must be a finite number, got {value}")
    elif isinstance(value, dict):
        for key, item in value.items():
            key_text = safe_text(str(key))
            name = key_text if where == "body" and depth == 0 else f"{where}.{key_text}"
            check_json_values(key, f"{name} (key)", depth + 1)
            check_json_values(item, name, depth + 1)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            check_json_values(item, f"{where}[{position}]", depth + 1)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(text: str) -> str:
    """`text` with anything that is not encodable as UTF-8 written as an escape (\\ud800)."""
    return text if _encodable(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _safe_loc(part: Any) -> str | int:
    return part if isinstance(part, int) and not isinstance(part, bool) else safe_text(str(part))


def validation_error_body(errors: Sequence[Any]) -> dict[str, Any]:
    """The 422 body: each error's location, message and type, never the caller's input (which may
    hold NaN or surrogates a JSON encoder refuses), plus one readable line naming the first field."""
    detail = []
    for error in errors:
        loc = [_safe_loc(part) for part in error.get("loc", ())]
        msg = safe_text(str(error.get("msg", "invalid"))).removeprefix("Value error, ")
        context = error.get("ctx") or {}
        if error.get("type") == "json_invalid" and "error" in context:
            msg = f"{msg}: {safe_text(str(context['error']))}"
        detail.append({"loc": loc, "msg": msg, "type": safe_text(str(error.get("type", "value_error")))})
    first = detail[0] if detail else {"loc": ["body"], "msg": "invalid request"}
    field = ".".join(str(part) for part in first["loc"][1:])
    return {"detail": detail, "message": f"{field}: {first['msg']}" if field else first["msg"]}


def exposure_error(host: str, api_key: str | None) -> str | None:
    """Why the service must not start on `host` (None: it may): beyond loopback it needs an API key."""
    import ipaddress

    if api_key:
        return None
    name = host.strip("[]")
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        loopback = False
    if loopback:
        return None
    return (
        f"--host {host}: listening beyond loopback needs an API key; set CHUNKYARD_API_KEY "
        "(or CHUNKYARD_API_KEY_FILE in Compose), or serve on 127.0.0.1"
    )
