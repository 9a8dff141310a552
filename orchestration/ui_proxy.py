"""The Dagster UI behind the query service's API key (the Compose `ui-proxy` service).

The Dagster webserver has no authentication, and anyone who reaches it can launch runs. This reverse
proxy is what Compose publishes instead: every HTTP request and websocket (the UI's GraphQL
subscriptions) needs CHUNKYARD_API_KEY, given as `Authorization: Bearer <key>` or as the password of
HTTP Basic auth, so a browser just asks for it (any user name). A request that passed gets a cookie
holding an HMAC of the key (never the key), which the browser then sends with its websockets too. A
request from another site's page (an `Origin` other than this host) is refused, because a browser sends
remembered Basic credentials cross-site. The key is never forwarded upstream and never logged.
An admin key made with `chunkyard keys create` opens the UI too, as Bearer or Basic password on each
request (it earns no cookie, so a revoked key stops working within a second), checked by the query
service (`orchestration.ui_proxy_keys`, CHUNKYARD_API_URL).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
from collections.abc import AsyncIterator, Iterable
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

import httpx
from chunkyard.orchestration.ui_proxy_keys import StoredKeys
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

KEY_ENV = "CHUNKYARD_API_KEY"
COOKIE = "chunkyard_ui"
HEALTH_PATH = "/__chunkyard/healthz"  # answered by the proxy itself, without the key (health checks)
REALM = 'Basic realm="chunkyard Dagster UI (password: the API key)", charset="UTF-8"'
# Hop-by-hop headers (RFC 9110 7.6.1) and what the proxy sets itself, never copied across.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "cookie",
}
# The proxy's server writes its own of these on every response.
OWN_RESPONSE_HEADERS = {"date", "server"}
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def cookie_token(key: str) -> str:
    """The cookie's value: an HMAC of the key, so a leaked cookie does not reveal the key itself."""
    return hmac.new(key.encode(), b"chunkyard-ui-proxy", hashlib.sha256).hexdigest()


def _given_key(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2]
    return None


def _cookies(connection: HTTPConnection) -> SimpleCookie:
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(CookieError):
        jar.load(connection.headers.get("cookie", ""))
    return jar


def authorized(connection: HTTPConnection, key: str) -> bool:
    """The key (Bearer or Basic password) or the cookie it earned."""
    given = _given_key(connection.headers.get("authorization", ""))
    if given is not None and hmac.compare_digest(given.encode(), key.encode()):
        return True
    morsel = _cookies(connection).get(COOKIE)
    return morsel is not None and hmac.compare_digest(morsel.value.encode(), cookie_token(key).encode())


def same_origin(connection: HTTPConnection) -> bool:
    """No `Origin`, or one naming this host: a page of another site cannot drive the UI."""
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == connection.headers.get("host", "").lower()


def _forward_headers(
    raw: Iterable[tuple[bytes, bytes]], drop: frozenset[str] = frozenset()
) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in raw if k.decode("latin-1").lower() not in HOP_BY_HOP | drop]


def _other_cookies(connection: HTTPConnection) -> str:
    """The request's cookies but ours (the UI's own, if any, still reach it)."""
    jar = _cookies(connection)
    return "; ".join(f"{name}={morsel.coded_value}" for name, morsel in jar.items() if name != COOKIE)


def build_app(upstream: str, key: str, stored: StoredKeys | None = None) -> Starlette:
    """The proxy for the Dagster webserver at `upstream` (http://host:port), guarded by `key` (and the
    stored admin keys `stored` checks, when given)."""
    if not key:
        raise ValueError(f"{KEY_ENV}: the UI proxy needs an API key")
    base = upstream.rstrip("/")
    client = httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(60.0, connect=10.0))
    token = cookie_token(key)

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def proxy_http(request: Request) -> Response:
        if not same_origin(request):
            return PlainTextResponse("cross-site request refused", status_code=403)
        bootstrap = authorized(request, key)
        if not bootstrap and not await _stored_admin(request, stored):
            return PlainTextResponse(
                "the Dagster UI needs the API key (user: any, password: the key)",
                status_code=401,
                headers={"WWW-Authenticate": REALM},
            )
        headers = _forward_headers(request.headers.raw)
        cookies = _other_cookies(request)
        if cookies:
            headers.append((b"cookie", cookies.encode("latin-1")))
        outgoing = client.build_request(
            request.method,
            httpx.URL(path=request.url.path, query=request.url.query.encode("latin-1")),
            headers=headers,
            content=request.stream(),
        )
        try:
            answer = await client.send(outgoing, stream=True)
        except httpx.TransportError as exc:
            return PlainTextResponse(f"the Dagster webserver is unreachable: {exc}", status_code=502)
        response = StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            background=BackgroundTask(answer.aclose),
        )
        response.raw_headers = _forward_headers(answer.headers.raw, frozenset(OWN_RESPONSE_HEADERS))
        if bootstrap:  # a stored key earns no cookie: it is checked again on every request
            response.raw_headers.append(
                (b"set-cookie", f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict".encode())
            )
        return response

    async def proxy_websocket(websocket: WebSocket) -> None:
        allowed = authorized(websocket, key) or await _stored_admin(websocket, stored)
        if not same_origin(websocket) or not allowed:
            await websocket.close(code=1008)  # before accept: the handshake is refused (403)
            return
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        target = base.replace("http", "ws", 1) + websocket.url.path
        if websocket.url.query:
            target += f"?{websocket.url.query}"
        offered = websocket.scope.get("subprotocols") or None
        async with connect(target, subprotocols=offered, open_timeout=10, max_size=None) as upstream_ws:
            await websocket.accept(subprotocol=upstream_ws.subprotocol)

            async def client_to_upstream() -> None:
                while True:
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    text = message.get("text")
                    await upstream_ws.send(text if text is not None else message.get("bytes") or b"")

            async def upstream_to_client() -> None:
                async for message in upstream_ws:
                    if isinstance(message, str):
                        await websocket.send_text(message)
                    else:
                        await websocket.send_bytes(message)

            tasks = [asyncio.create_task(client_to_upstream()), asyncio.create_task(upstream_to_client())]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            for task in done:  # either side closing ends the session
                if task.exception() is not None and not isinstance(
                    task.exception(), (ConnectionClosed, WebSocketDisconnect)
                ):
                    raise task.exception()  # type: ignore[misc]
        if websocket.client_state.name == "CONNECTED":
            await websocket.close()

    return Starlette(
        routes=[
            Route(HEALTH_PATH, health, methods=["GET"]),
            WebSocketRoute("/{path:path}", proxy_websocket),
            Route("/{path:path}", proxy_http, methods=METHODS),
        ],
        lifespan=_closing(client, stored),
    )


async def _stored_admin(connection: HTTPConnection, stored: StoredKeys | None) -> bool:
    if stored is None:
        return False
    return await stored.admin(_given_key(connection.headers.get("authorization", "")))


def _closing(client: httpx.AsyncClient, stored: StoredKeys | None = None):  # noqa: ANN202 (Starlette's lifespan type)
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()
        if stored is not None:
            await stored.aclose()

    return lifespan
