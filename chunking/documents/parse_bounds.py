"""Per-file time and memory bounds for the parsers of untrusted formats (PDF, DOCX, PPTX, HTML, JSON).

A size limit does not bound a document's cost: a small PDF can take minutes or gigabytes to parse.
So those parsers run in a worker process: `run_bounded(func, *args)` sends the call to it and waits at
most CHUNKYARD_PARSE_TIMEOUT seconds (default 120); the worker's address space is capped
(RLIMIT_AS) at CHUNKYARD_PARSE_MEMORY_MB (default 2048) above what it holds after importing the
parsers. A file over either bound raises UnusableFile with the reason ("parse took longer than 120 s",
"parse used more than 2048 MB"); the worker is then replaced, and the other files go on. The worker
lives for the whole scan (started once, on the first bounded file), so the bound costs one process
start per scan plus a pickle of each file's bytes and text, not a process per file. `func` must be a
module-level function (pickled by reference): the worker unpickles it, and so imports its module,
before the cap.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.environment import env_int

TIMEOUT_ENV = "CHUNKYARD_PARSE_TIMEOUT"
MEMORY_ENV = "CHUNKYARD_PARSE_MEMORY_MB"
DEFAULT_TIMEOUT_S = 120
DEFAULT_MEMORY_MB = 2048
_HEADER = struct.Struct("!Q")
# A worker's start (the interpreter and the parsers' imports) is not part of any file's parse time.
STARTUP_TIMEOUT_S = 300
_READY = b"ready"
T = TypeVar("T")


def parse_timeout() -> int:
    """Seconds one file's parse may take (CHUNKYARD_PARSE_TIMEOUT)."""
    return env_int(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, unit="a number of seconds") or DEFAULT_TIMEOUT_S


def parse_memory_mb() -> int:
    """Megabytes one file's parse may add to the worker (CHUNKYARD_PARSE_MEMORY_MB)."""
    return env_int(MEMORY_ENV, DEFAULT_MEMORY_MB, unit="a number of megabytes") or DEFAULT_MEMORY_MB


class _Worker:
    """One parsing process: requests and answers as length-prefixed pickles over its stdin/stdout."""

    def __init__(self, func: Callable[..., Any], memory_mb: int, warm_up: Callable[[], None] | None) -> None:
        self.memory_mb = memory_mb
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chunkyard.chunking.documents.parse_bounds",
                str(memory_mb),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
            close_fds=True,
        )
        # what the worker loads before its cap: `func`'s module (unpickled by reference) and `warm_up`
        setup = pickle.dumps((func, warm_up), protocol=pickle.HIGHEST_PROTOCOL)
        assert self.process.stdin is not None
        self.process.stdin.write(_HEADER.pack(len(setup)) + setup)
        self.process.stdin.flush()
        self.ready = False

    def call(self, payload: bytes, timeout: float) -> tuple[str, Any]:
        """The worker's answer to `payload`, or ("timeout", None) / ("died", returncode)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if not self.ready:
            started = _read_exactly(self.process.stdout, len(_READY), time.monotonic() + STARTUP_TIMEOUT_S)
            if started != _READY:
                self.stop()
                raise RuntimeError(
                    f"the parsing worker did not start (exit status {self.process.returncode})"
                )
            self.ready = True
        try:
            self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.process.stdin.flush()
        except BrokenPipeError:
            return "died", self.process.wait()
        deadline = time.monotonic() + timeout
        header = _read_exactly(self.process.stdout, _HEADER.size, deadline)
        if header is None:
            return ("timeout", None) if self.process.poll() is None else ("died", self.process.wait())
        body = _read_exactly(self.process.stdout, _HEADER.unpack(header)[0], deadline)
        if body is None:
            return ("timeout", None) if self.process.poll() is None else ("died", self.process.wait())
        return pickle.loads(body)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def _read_exactly(stream: IO[bytes], size: int, deadline: float) -> bytes | None:
    """`size` bytes from `stream` before `deadline`; None on timeout or end of stream."""
    chunks, got = [], 0
    fd = stream.fileno()
    while got < size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


_lock = threading.Lock()
_workers: dict[tuple[str, int, str], _Worker] = {}  # (func's module, memory bound, warm-up's name)


def _stop_all() -> None:
    for worker in _workers.values():
        worker.stop()
    _workers.clear()


atexit.register(_stop_all)


def run_bounded(func: Callable[..., T], *args: Any, warm_up: Callable[[], None] | None = None) -> T:
    """`func(*args)` in the parsing worker, under the time and memory bounds; UnusableFile past them.

    An exception `func` raises is raised here (UnusableFile keeps its reason). `warm_up` is a
    module-level function a new worker runs before it is ready (the parsers' lazy initialisation: a
    first HTML parse loads trafilatura's data), so no file's time includes it."""
    timeout, memory_mb = parse_timeout(), parse_memory_mb()
    payload = pickle.dumps((func, args), protocol=pickle.HIGHEST_PROTOCOL)
    key = (func.__module__, memory_mb, getattr(warm_up, "__qualname__", ""))
    with _lock:
        worker = _workers.get(key)
        if worker is None or worker.process.poll() is not None:
            worker = _workers[key] = _Worker(func, memory_mb, warm_up)
        status, value = worker.call(payload, timeout)
        if status not in ("ok", "raise"):  # a worker past a bound is replaced on the next call
            worker.stop()
            del _workers[key]
    if status == "ok":
        return value
    if status == "raise":
        raise value
    if status == "memory":
        raise UnusableFile(f"parse used more than {memory_mb} MB ({MEMORY_ENV}): not indexed")
    if status == "timeout":
        raise UnusableFile(f"parse took longer than {timeout} s ({TIMEOUT_ENV}): not indexed")
    if status == "died":
        raise UnusableFile(
            f"the parser crashed (exit status {value}), probably past the memory bound of {memory_mb} MB"
            f" ({MEMORY_ENV}): not indexed"
        )
    raise UnusableFile(f"cannot parse: {value}")


# libxml2's error codes (lxml.etree.ErrorTypes) for the two ways a parse meets a bound rather than bad input.
_XML_NO_MEMORY = 2  # ERR_NO_MEMORY: an allocation failed (the worker's memory bound, RLIMIT_AS)
_XML_RESOURCE_LIMIT = 114  # ERR_RESOURCE_LIMIT: one of libxml2's own safety limits (no XML_PARSE_HUGE)
_XML_LIMITS = {
    "Excessive depth": "elements nested deeper than the XML parser's limit of 256 levels",
    "Text node too long": "a text run longer than the XML parser's limit of 10,000,000 bytes",
    "Buffer size limit": "a value longer than the XML parser's limit of 10,000,000 bytes",
}


def bound_hit(exc: BaseException, kind: str) -> BaseException | None:
    """The error that names the bound a parser of a `kind` file (DOCX, PPTX, PDF) met, or None when
    `exc` is bad input, for the parser's own message.

    Memory, however the parser reports it (MemoryError, or lxml's syntax error for libxml2's failed
    allocation, "unknown error"), comes back as MemoryError, which the worker answers as the memory
    bound ("parse used more than N MB"); libxml2's own limits (depth, text size) as UnusableFile
    naming the limit.
    """
    code = getattr(exc, "code", None)
    if isinstance(exc, MemoryError) or (_is_xml_error(exc) and code == _XML_NO_MEMORY):
        return MemoryError(f"{kind} parse ran out of memory")
    if _is_xml_error(exc) and code == _XML_RESOURCE_LIMIT:
        message = str(exc)
        limit = next((text for key, text in _XML_LIMITS.items() if key in message), None)
        what = limit or f"a safety limit of the XML parser ({message.splitlines()[0]})"
        return UnusableFile(f"{kind} has {what}: not indexed")
    return None


def _is_xml_error(exc: BaseException) -> bool:
    return type(exc).__module__ == "lxml.etree" and type(exc).__name__ == "XMLSyntaxError"


def _answer(out: IO[bytes], status: str, value: Any) -> None:
    try:
        body = pickle.dumps((status, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that does not pickle: its type and message
        body = pickle.dumps(("error", f"{type(value).__name__}: {value}"))
    out.write(_HEADER.pack(len(body)) + body)
    out.flush()


def _serve(memory_mb: int) -> None:
    """The worker: load its setup (the function it serves, which imports that function's module, and
    the warm-up, which it runs), cap the address space, then answer calls until stdin closes."""
    import resource

    setup = sys.stdin.buffer.read(_HEADER.unpack(sys.stdin.buffer.read(_HEADER.size))[0])
    _func, warm_up = pickle.loads(setup)
    if warm_up is not None:
        warm_up()
    with open("/proc/self/statm") as statm:  # the baseline after the imports, in pages
        baseline = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = baseline + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    source, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a parser's print never corrupts the answers
    out.write(_READY)
    out.flush()
    while header := source.read(_HEADER.size):
        func, args = pickle.loads(source.read(_HEADER.unpack(header)[0]))
        try:
            result = func(*args)
        except MemoryError:
            _answer(out, "memory", None)
            return  # past the bound its state may be broken: the next call starts a fresh worker
        except Exception as exc:
            _answer(out, "raise", exc)
        else:
            try:
                _answer(out, "ok", result)
            except MemoryError:
                _answer(out, "memory", None)
                return


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
