"""`python -m orchestration.secret_env COMMAND...`: the Compose secrets into the environment, then COMMAND.

Compose mounts secrets as files (`/run/secrets/...`) and holds no password itself. This reads
CHUNKYARD_DATABASE_PASSWORD_FILE into DATABASE_URL, URL-encoded (a password such as `p@ss/w:rd`
stays one password instead of moving the host), and into DAGSTER_PG_PASSWORD (what dagster.yaml
names), and CHUNKYARD_API_KEY_FILE into CHUNKYARD_API_KEY; then it replaces itself with COMMAND.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

PASSWORD_FILE_ENV = "CHUNKYARD_DATABASE_PASSWORD_FILE"  # orchestration.stack
API_KEY_FILE_ENV = "CHUNKYARD_API_KEY_FILE"


def with_password(url: str, password: str) -> str:
    """`url` with `password` set, URL-encoded; an error names DATABASE_URL when it has no host."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"DATABASE_URL: expected postgresql://user@host:port/db, got {url!r}")
    user = parts.username or ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = f":{parts.port}" if parts.port else ""
    netloc = f"{user}:{quote(password, safe='')}@{host}{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def read_secret(variable: str) -> str | None:
    """The first line of the file `variable` names (None when unset); an error names the variable."""
    path = os.environ.get(variable)
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SystemExit(f"{variable}: cannot read {path}: {exc.strerror or exc}") from None
    if not text:
        raise SystemExit(f"{variable}: {path} is empty")
    return text.splitlines()[0]


def apply_secrets(env: dict[str, str]) -> dict[str, str]:
    """`env` with the secrets the *_FILE variables name filled in."""
    out = dict(env)
    password = read_secret(PASSWORD_FILE_ENV)
    if password is not None:
        out["DATABASE_URL"] = with_password(out.get("DATABASE_URL", ""), password)
        out["DAGSTER_PG_PASSWORD"] = password
    api_key = read_secret(API_KEY_FILE_ENV)
    if api_key is not None:
        out["CHUNKYARD_API_KEY"] = api_key
    return out


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m orchestration.secret_env COMMAND [ARGS...]")
    os.environ.update(apply_secrets(dict(os.environ)))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
