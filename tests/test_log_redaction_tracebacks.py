"""Tracebacks are redacted too (issue 41): a logged exception's message, the source lines its traceback
shows and a record's stack never write the API key, a stored key's token or a database password.
A real logger and handler with `RedactSecrets`, and real exceptions from psycopg and the key store."""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from chunkyard.retrieval.observability.log_redaction import REDACTED, RedactSecrets, log_config

API_KEY = "bootstrap-5e-key-value"


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose one handler writes to a buffer through RedactSecrets (as `log_config` sets it up)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.addFilter(RedactSecrets([API_KEY]))
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(f"chunkyard.test-redaction-{uuid.uuid4().hex[:6]}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, buffer
    logger.removeHandler(handler)


def test_a_database_password_in_a_traceback_is_redacted(logged) -> None:
    logger, buffer = logged
    try:  # the traceback shows this line, password and all; nothing listens on port 9
        psycopg.connect("postgresql://chunkyard:hunter2-5e-secret@127.0.0.1:9/chunkyard", connect_timeout=2)
    except psycopg.OperationalError:
        logger.exception("cannot reach the database")
    text = buffer.getvalue()
    assert "Traceback (most recent call last)" in text and "OperationalError" in text
    assert "hunter2-5e-secret" not in text
    assert f"postgresql://chunkyard:{REDACTED}@127.0.0.1:9/chunkyard" in text


def test_keys_in_an_exception_message_are_redacted(logged, store) -> None:
    logger, buffer = logged
    _, token = store.keys.create(f"redact-{uuid.uuid4().hex[:6]}", "admin", actor="test")
    known = {API_KEY: "bootstrap"}
    for presented in (API_KEY, token):
        try:
            known[presented + "!"]  # a KeyError whose message holds the key
        except KeyError:
            logger.error("lookup failed", exc_info=True)
    try:
        raise RuntimeError(f"service refused {token} for postgres://app:pa55word-5e@db/app")
    except RuntimeError as exc:
        logger.warning("failed: %s", exc, exc_info=exc, stack_info=True)
    text = buffer.getvalue()
    assert (
        text.count("\nKeyError: ") == 2 and "RuntimeError" in text and "Stack (most recent call last)" in text
    )
    for secret in (API_KEY, token, "pa55word-5e"):
        assert secret not in text
    assert text.count(REDACTED) >= 5


def test_an_already_formatted_traceback_is_redacted(logged) -> None:
    """A record another handler formatted first carries `exc_text`: that text is redacted for ours."""
    logger, buffer = logged
    first = io.StringIO()
    plain = logging.StreamHandler(first)  # no filter: formats the record (sets exc_text) first
    logger.handlers.insert(0, plain)
    try:
        raise ValueError(f"bad key {API_KEY}")
    except ValueError:
        logger.exception("rejected")
    logger.removeHandler(plain)
    assert API_KEY in first.getvalue()  # the handler without the filter wrote it
    assert API_KEY not in buffer.getvalue() and f"bad key {REDACTED}" in buffer.getvalue()


def test_uvicorns_logging_configuration_redacts_tracebacks() -> None:
    """`log_config`, which `chunkyard serve` and `chunkyard mcp --http` run with, filters every handler."""
    config = log_config([API_KEY])
    assert all(handler["filters"] == ["redact"] for handler in config["handlers"].values())
    made = config["filters"]["redact"]
    redactor = made["()"](secrets=made["secrets"])
    try:
        raise ConnectionError(f"gave up on {API_KEY}")
    except ConnectionError as exc:
        record = logging.LogRecord(
            "uvicorn.error", logging.ERROR, __file__, 1, "boom", (), (type(exc), exc, None)
        )
    redactor.filter(record)
    assert API_KEY not in logging.Formatter().format(record)
