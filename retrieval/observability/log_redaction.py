"""Logs that never hold a secret: query parameter values and the server's keys are written as [redacted].

A caller may put a key anywhere: `?api_key=...` (never accepted, but sent), a path segment, any
parameter of any route. uvicorn's access log writes the path with its query string, so
`RedactSecrets` (a logging filter on every handler `log_config` makes) rewrites each record's
arguments before they are formatted: the value of every query parameter except the few the
service defines as harmless (`SAFE_QUERY_NAMES`), and every occurrence of a configured secret.
Whatever the secrets configured, the password of any URL (`postgresql://user:PASSWORD@host`) and
any stored key's token (`cky_...`) are redacted too. A record's traceback (`exc_info`, `exc_text`)
and stack (`stack_info`) pass through the same: an exception's message and the source lines and
local values a traceback shows are text the log would otherwise write as they are.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import traceback
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
# Query parameters whose values are never secret and help reading the log (`/v1/indexes?full=true`).
SAFE_QUERY_NAMES = frozenset({"full"})
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;#\s\"?]+)=(?P<value>[^&;#\s\"]*)")
MIN_SECRET_CHARS = 4  # shorter "secrets" would redact ordinary words
# The password of a URL's userinfo (`scheme://user:password@`), up to the last `@` before the host.
_URL_PASSWORD = re.compile(r"(?P<lead>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<password>[^\s/]*)(?=@)")
# A stored key's token (retrieval.store.api_key.TOKEN_SHAPE), wherever it appears.
_TOKEN = re.compile(r"\bcky_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with each query value but the safe ones, and each secret, replaced by [redacted]."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    text = _URL_PASSWORD.sub(lambda m: m["lead"] + REDACTED if m["password"] else m[0], text)
    text = _TOKEN.sub(REDACTED, text)

    def pair(match: re.Match[str]) -> str:
        if match["name"].lower() in SAFE_QUERY_NAMES or not match["value"]:
            return match[0]
        return f"{match['lead']}{match['name']}={REDACTED}"

    return _QUERY_PAIR.sub(pair, text)


class RedactSecrets(logging.Filter):
    """A handler filter: every string argument (and message) of a record passes through `redact`.

    Arguments keep their positions and types where nothing is redacted, so formatters that unpack
    them (uvicorn's access formatter) still work; only a non-string argument whose text held a
    secret becomes that text, redacted."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, self.secrets)
        if isinstance(record.args, tuple):
            record.args = tuple(self._argument(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: self._argument(arg) for key, arg in record.args.items()}
        if record.exc_info and not record.exc_text:
            # formatted here, as logging.Formatter would, so that the formatter writes the redacted
            # text (it formats exc_info only when exc_text is empty)
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True

    def _argument(self, arg: Any) -> Any:
        if isinstance(arg, str):
            return redact(arg, self.secrets)
        if isinstance(arg, int | float | bool) or arg is None:
            return arg
        text = str(arg)
        cleaned = redact(text, self.secrets)
        return arg if cleaned == text else cleaned


def secrets_from_env() -> tuple[str, ...]:
    """The secrets this process holds: CHUNKYARD_API_KEY and the password in DATABASE_URL."""
    from urllib.parse import urlsplit

    found = [os.environ.get("CHUNKYARD_API_KEY", "")]
    with contextlib.suppress(ValueError):  # not a URL (a libpq key=value string): nothing to take
        found.append(urlsplit(os.environ.get("DATABASE_URL", "")).password or "")
    return tuple(secret for secret in found if secret)


def log_config(secrets: Iterable[str] = ()) -> dict[str, Any]:
    """uvicorn's logging configuration with `RedactSecrets` on every handler, chunkyard's loggers included."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"redact": {"()": RedactSecrets, "secrets": tuple(secrets)}}
    for handler in config["handlers"].values():
        handler["filters"] = ["redact"]
    # chunkyard's own loggers (chunkyard.service, ...) through the same redacting handler
    config["loggers"]["chunkyard"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config
