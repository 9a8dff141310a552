"""A fake OpenAI-compatible `/v1/embeddings` server on loopback, for tests and benchmarks.

A real HTTP server (stdlib `ThreadingHTTPServer`) in a thread of the calling process, on a free
port. Its vectors are deterministic (seeded by a hash of the text). It can be slow, fail the next
requests with a status (and `Retry-After`), answer with the wrong dimension or model, or hang every
request after the n-th until released; it counts requests, texts answered and requests in flight.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def fake_vector(text: str, dim: int) -> np.ndarray:
    """The server's vector for `text`: a unit vector seeded by the text's SHA-256."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


@dataclass
class Failure:
    status: int
    retry_after: str | None = None


@dataclass
class FakeEmbeddingServer:
    """Start with `with FakeEmbeddingServer() as server:`; `server.url` is the API base (…/v1)."""

    dim: int = 32
    model: str = "fake-embed"
    delay: float = 0.0  # seconds before every answer
    answer_model: str | None = None  # the model name answered (default: `model`)
    answer_dim: int | None = None  # the dimension answered (default: `dim`)
    hang_after: int | None = None  # requests after this many hang until `release()`
    requests: int = 0
    answered: Counter = field(default_factory=Counter)  # text -> times answered with a 200
    batch_sizes: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of each request
    authorizations: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    port: int = 0  # 0: any free port

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[Failure] = []
        self._gate = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # --- behaviour ------------------------------------------------------------------------
    def fail_next(self, status: int, times: int = 1, retry_after: str | None = None) -> None:
        """The next `times` requests get `status` (with `Retry-After: retry_after` when given)."""
        with self._lock:
            self._failures.extend(Failure(status, retry_after) for _ in range(times))

    def release(self) -> None:
        """Hung requests (and later ones) answer 503 without embedding; `hang_after` is cleared."""
        self.hang_after = None
        self._gate.set()

    # --- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeEmbeddingServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="fake-embeddings").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._gate.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # --- one request ----------------------------------------------------------------------
    def answer(self, body: dict[str, Any], authorization: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self._lock:
            self.requests += 1
            number = self.requests
            self.arrivals.append(time.monotonic())
            self.authorizations.append(authorization)
            failure = self._failures.pop(0) if self._failures else None
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hang_after is not None and number > self.hang_after:
                self._gate.wait(timeout=120)
                return 503, {}, {"error": {"message": "released"}}
            if self.delay:
                time.sleep(self.delay)
            if failure is not None:
                headers = {"Retry-After": failure.retry_after} if failure.retry_after is not None else {}
                return failure.status, headers, {"error": {"message": f"fake failure {failure.status}"}}
            texts = body.get("input")
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                return 400, {}, {"error": {"message": "input: expected a list of strings"}}
            dim = self.answer_dim or int(body.get("dimensions") or self.dim)
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(t, dim).tolist()}
                for i, t in enumerate(texts)
            ]
            data.reverse()  # the protocol orders by `index`, not by position
            with self._lock:
                self.answered.update(texts)
                self.batch_sizes.append(len(texts))
            tokens = sum(len(t.split()) for t in texts)
            return (
                200,
                {},
                {
                    "object": "list",
                    "data": data,
                    "model": self.answer_model or self.model,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )
        finally:
            with self._lock:
                self.in_flight -= 1


class _Handler(BaseHTTPRequestHandler):
    fake: FakeEmbeddingServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/embeddings"):
            status, headers, payload = 404, {}, {"error": {"message": f"no route {self.path}"}}
        else:
            try:
                body = json.loads(raw)
            except ValueError:
                status, headers, payload = 400, {}, {"error": {"message": "body: not JSON"}}
            else:
                status, headers, payload = self.fake.answer(body, self.headers.get("Authorization", ""))
        encoded = json.dumps(payload).encode()
        try:
            self.send_response(status)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)
        except (BrokenPipeError, ConnectionResetError):  # the client was killed or timed out
            pass

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def main() -> None:
    """`python -m tests.fake_embedding_server --delay 0.1`: serve in this process (its own GIL) until
    killed; prints the URL on the first line."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--model", default="fake-embed")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args()
    with FakeEmbeddingServer(dim=args.dim, model=args.model, delay=args.delay, port=args.port) as server:
        print(server.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
