"""How long a client may take and how many may connect: header, body and keep-alive timeouts, a connection cap.

uvicorn (0.54) has a keep-alive timeout but no header or body read timeout: a client that sends one
header byte every few seconds, or a body shorter than its `Content-Length`, holds its connection
(and a file descriptor) forever. `ServerLimits` adds what nginx has (`client_header_timeout` and
`client_body_timeout`, 60 s each, the body one between two reads), a cap on header bytes and a
cap on open connections, in `protocol_class`: a subclass of uvicorn's httptools protocol whose
parser callbacks (`on_message_begin`, `on_headers_complete`, `on_body`, `on_message_complete`)
mark where a request is. Past a timeout the client gets `408 Request Timeout` and the connection
closes; past the header cap, 431; past the connection cap, 503 with `Retry-After` at once.

`serve` runs an app (the query service, the ui-proxy) with these limits and the redacting log
configuration of `retrieval.observability.log_redaction`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chunkyard.chunking.environment import env_float, env_int
from chunkyard.retrieval.observability.log_redaction import log_config, secrets_from_env
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("uvicorn.error")

HEADER_TIMEOUT_ENV = "CHUNKYARD_HEADER_TIMEOUT_S"
BODY_TIMEOUT_ENV = "CHUNKYARD_BODY_TIMEOUT_S"
KEEP_ALIVE_ENV = "CHUNKYARD_KEEP_ALIVE_S"
MAX_CONNECTIONS_ENV = "CHUNKYARD_MAX_CONNECTIONS"
LINGER_S = 2.0  # after a refusal, how long the client's remaining bytes are read and dropped


def _env_seconds(name: str, default: float) -> float:
    return env_float(name, default, above_minimum=True, maximum=3600, unit="a number of seconds")


@dataclass(frozen=True)
class ServerLimits:
    """What one client may hold: seconds to send its headers, between two body reads, idle between
    requests; the header bytes of one request; the connections open at once (all clients)."""

    header_timeout_s: float = 60.0
    body_timeout_s: float = 60.0
    keep_alive_s: float = 5.0
    max_header_bytes: int = 64 * 1024
    max_connections: int = 1000

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be more than 0 seconds, got {getattr(self, name)}")
        if self.max_header_bytes < 1024:
            raise ValueError(f"max_header_bytes: must be at least 1024, got {self.max_header_bytes}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections: must be at least 1, got {self.max_connections}")

    @classmethod
    def from_env(cls) -> ServerLimits:
        """The defaults, each overridden by its CHUNKYARD_* variable when set."""
        cap = env_int(MAX_CONNECTIONS_ENV, cls.max_connections) or cls.max_connections
        return cls(
            header_timeout_s=_env_seconds(HEADER_TIMEOUT_ENV, cls.header_timeout_s),
            body_timeout_s=_env_seconds(BODY_TIMEOUT_ENV, cls.body_timeout_s),
            keep_alive_s=_env_seconds(KEEP_ALIVE_ENV, cls.keep_alive_s),
            max_connections=cap,
        )


def _status(code: int, reason: str, detail: str, extra: str = "") -> bytes:
    body = f'{{"detail": "{detail}"}}'.encode()
    head = (
        f"HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode() + body


def protocol_class(limits: ServerLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with `limits` enforced per connection (pass as `http=`)."""

    class LimitedProtocol(HttpToolsProtocol):
        """A connection that is closed when its client is too slow or sends too much header."""

        _header_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _in_head = True  # from the connection's start or a request's end to the next headers' end
        _head_bytes = 0
        _begun = False  # a request's first byte arrived and its body has not ended
        _draining = False  # refused: reading only to drop what comes until the close

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                log.warning(
                    "refused a connection: %d open, the cap is %d",
                    len(self.connections) - 1,
                    limits.max_connections,
                )
                self._refuse(
                    503,
                    "Service Unavailable",
                    "too many open connections; retry shortly",
                    "retry-after: 1\r\n",
                    linger=False,  # at the cap: free the descriptor now
                )
                return
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_timers()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._draining:  # answered and closing: what still comes is dropped
                return
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if (
                self._in_head
                and self._head_bytes > limits.max_header_bytes
                and not self.transport.is_closing()
            ):
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"request headers over {limits.max_header_bytes} bytes",
                )

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._begun = True
            if self._header_timer is None:  # a keep-alive request's first byte starts its clock
                self._arm_header_timer()

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._cancel_timers()
            super().on_headers_complete()
            if not (self.parser.should_upgrade() and self._should_upgrade()):
                self._arm_body_timer()

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            self._arm_body_timer()  # like nginx: the time between two reads, not the whole body

        def on_message_complete(self) -> None:
            self._begun = False
            self._in_head, self._head_bytes = True, 0  # what comes next is the next request's head
            self._cancel_timers()
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._cancel_timers()
            super().handle_websocket_upgrade()

        def _arm_header_timer(self) -> None:
            self._cancel_timers()
            self._header_timer = self.loop.call_later(limits.header_timeout_s, self._header_timed_out)

        def _arm_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
            self._body_timer = self.loop.call_later(limits.body_timeout_s, self._body_timed_out)

        def _cancel_timers(self) -> None:
            for timer in (self._header_timer, self._body_timer):
                if timer is not None:
                    timer.cancel()
            self._header_timer = self._body_timer = None

        def _header_timed_out(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if not self._begun:
                self.transport.close()  # idle before a first byte: nothing to answer
                return
            log.info("%s: headers not complete within %.0f s; closed", self._peer(), limits.header_timeout_s)
            self._refuse(408, "Request Timeout", f"headers not complete within {limits.header_timeout_s:g} s")

        def _body_timed_out(self) -> None:
            self._body_timer = None
            if self.transport.is_closing():
                return
            if self.flow.read_paused:  # the app is behind, not the client: wait for it
                self._arm_body_timer()
                return
            log.info("%s: no body bytes for %.0f s; closed", self._peer(), limits.body_timeout_s)
            if self.cycle is not None and not self.cycle.response_started:
                self._refuse(408, "Request Timeout", f"no request body bytes for {limits.body_timeout_s:g} s")
            else:
                self.transport.close()

        def _refuse(self, code: int, reason: str, detail: str, extra: str = "", linger: bool = True) -> None:
            """Answer `code` and close. With `linger`, like nginx's lingering close: stop writing, then
            read and drop what the client still sends for LINGER_S, so its unread bytes do not turn
            the close into a reset that loses the answer."""
            self._cancel_timers()
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.keep_alive = False
                self.cycle.disconnected = True  # the app's receive() gets http.disconnect, its send() a no-op
                self.cycle.message_event.set()
            self.transport.write(_status(code, reason, detail, extra))
            if not linger or not self.transport.can_write_eof():
                self.transport.close()
                return
            self._draining = True
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

        def _peer(self) -> str:
            return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"

    return LimitedProtocol


def serve(
    app: Any,
    host: str,
    port: int,
    *,
    limits: ServerLimits | None = None,
    secrets: Iterable[str] = (),
    log_level: str = "info",
) -> None:
    """Run `app` (an ASGI app or an import string) under uvicorn with `limits` (default: from the
    environment) and a log that never shows `secrets`, the environment's (the API key, the database
    password) or a query parameter's value."""
    import uvicorn

    limits = limits or ServerLimits.from_env()
    uvicorn.run(
        app,
        host=host,
        port=port,
        http=protocol_class(limits),
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
        log_config=log_config((*secrets, *secrets_from_env())),
        log_level=log_level,
    )
