"""`.chunkyard/service.json`: the query service a project runs, so `chunkyard search` can use it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

NAME = "service.json"
READY_TIMEOUT_S = 1.0


def write(home: Path, host: str, port: int) -> dict[str, Any]:
    """Record this process as the project's service (the URL a local client reaches it on)."""
    reach = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    record = {"url": f"http://{reach}:{port}", "pid": os.getpid(), "host": host, "port": port}
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f"{NAME}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.replace(home / NAME)
    return record


def remove(home: Path, pid: int) -> None:
    """Forget the record if it is still this process's (a newer service may have replaced it)."""
    path = home / NAME
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def running(home: Path) -> dict[str, Any] | None:
    """The project's service if its process lives and `/readyz` answers 200 now, else None."""
    try:
        record = json.loads((home / NAME).read_text(encoding="utf-8"))
        pid = int(record["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        response = httpx.get(f"{record['url']}/readyz", timeout=READY_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    return record if response.status_code == 200 else None
