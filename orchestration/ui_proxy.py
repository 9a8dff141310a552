"""The Dagster UI behind the query service's API key (the Compose `ui-proxy` service).

The Dagster webserver has no authentication, and anyone who reaches it can launch runs. This reverse
proxy is what Compose publishes instead: every HTTP request and websocket (the UI's GraphQL
subscriptions) needs CHUNKYARD_API_KEY, given as `Authorization: Bearer <key>` or as the password of
HTTP Basic auth, so a browser just asks for it (any user name). A request that passed with the key
gets a session cookie of its own: when it was issued, a random session id and an HMAC of both under
the key (never the key), valid for CHUNKYARD_UI_SESSION_S seconds (8 hours; `Max-Age` tells the
browser, the proxy checks it itself), which the browser then sends with its websockets too. A leaked
cookie works for its one session until it expires (or the key changes), not for ever. A
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
import secrets
import time
from collections.abc import AsyncIterator, Iterable
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, unquote_plus, urlencode, urlsplit

import httpx
from chunkyard.chunking.environment import env_int
from chunkyard.orchestration.ui_proxy_keys import StoredKeys
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

KEY_ENV = "CHUNKYARD_API_KEY"
COOKIE = "chunkyard_ui"
SESSION_ENV = "CHUNKYARD_UI_SESSION_S"
SESSION_SECONDS = 8 * 3600  # a session cookie's lifetime: a working day
CLOCK_SKEW_S = 60  # a cookie issued up to this far in the future (clocks of replicas) still counts
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


def _session_mac(key: str, issued: int, session: str) -> str:
    message = f"chunkyard-ui-session|{issued}|{session}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def session_cookie(key: str, issued: int | None = None) -> str:
    """A new session's cookie value: `issued.session.mac`, an HMAC under the key (the key is not in it)."""
    issued = int(time.time()) if issued is None else issued
    session = secrets.token_urlsafe(18)
    return f"{issued}.{session}.{_session_mac(key, issued, session)}"


def valid_session(value: str, key: str, lifetime_s: int, now: float | None = None) -> bool:
    """True for a cookie this proxy issued under `key` less than `lifetime_s` seconds ago."""
    issued_text, _, rest = value.partition(".")
    session, _, mac = rest.partition(".")
    if not issued_text.isdigit() or not session or not mac:
        return False
    issued = int(issued_text)
    if not hmac.compare_digest(mac.encode(), _session_mac(key, issued, session).encode()):
        return False
    age = (time.time() if now is None else now) - issued
    return -CLOCK_SKEW_S <= age < lifetime_s


def session_lifetime() -> int:
    """CHUNKYARD_UI_SESSION_S, or 8 hours."""
    return env_int(SESSION_ENV, SESSION_SECONDS, minimum=60, unit="a number of seconds") or SESSION_SECONDS


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


def authorized(connection: HTTPConnection, key: str, lifetime_s: int = SESSION_SECONDS) -> str | None:
    """How the request is let in: "session" (a valid cookie), "key" (Bearer or Basic password), or None."""
    morsel = _cookies(connection).get(COOKIE)
    if morsel is not None and valid_session(morsel.value, key, lifetime_s):
        return "session"
    given = _given_key(connection.headers.get("authorization", ""))
    if given is not None and hmac.compare_digest(given.encode(), key.encode()):
        return "key"
    return None


def same_origin(connection: HTTPConnection) -> bool:
    """No `Origin`, or one naming this host: a page of another site cannot drive the UI."""
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == connection.headers.get("host", "").lower()


def without_key(query: str, key: str) -> str:
    """The query string less every parameter holding the key (`?api_key=...` is never accepted, and
    must not reach the webserver's log either); unchanged when none does."""
    if key not in unquote_plus(query):
        return query
    kept = [
        (name, value) for name, value in parse_qsl(query, keep_blank_values=True) if key not in value + name
    ]
    return urlencode(kept)


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
    lifetime = session_lifetime()

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def proxy_http(request: Request) -> Response:
        if not same_origin(request):
            return PlainTextResponse("cross-site request refused", status_code=403)
        admitted = authorized(request, key, lifetime)
        if admitted is None and not await _stored_admin(request, stored):
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
            httpx.URL(path=request.url.path, query=without_key(request.url.query, key).encode("latin-1")),
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
        if admitted == "key":  # a new session; one with a valid cookie keeps it (a stored key earns none)
            cookie = f"{COOKIE}={session_cookie(key)}; Path=/; Max-Age={lifetime}; HttpOnly; SameSite=Strict"
            response.raw_headers.append((b"set-cookie", cookie.encode()))
        return response

    async def proxy_websocket(websocket: WebSocket) -> None:
        allowed = authorized(websocket, key, lifetime) is not None or await _stored_admin(websocket, stored)
        if not same_origin(websocket) or not allowed:
            await websocket.close(code=1008)  # before accept: the handshake is refused (403)
            return
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        target = base.replace("http", "ws", 1) + websocket.url.path
        query = without_key(websocket.url.query, key)
        if query:
            target += f"?{query}"
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
