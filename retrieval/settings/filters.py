"""Search filters match chunk metadata by containment; query operators (`$regex`, `$in`, ...) are refused by name."""

from __future__ import annotations

from typing import Any

CONTAINMENT = 'filters match chunk metadata by containment, exact values only (e.g. {"lang": "en"})'


def operator_error(filters: Any, where: str = "filters") -> str | None:
    """Why `filters` cannot run: the first key that is a query operator (`$...`), named with its
    path (`filters.doc_id: operator '$regex' is not supported; ...`); None when there is none.

    Containment would read `{"doc_id": {"$regex": "x"}}` as metadata holding an object with a key
    `$regex`, which no document has: 200 with no results instead of saying what is wrong."""
    if isinstance(filters, dict):
        for key, value in filters.items():
            if isinstance(key, str) and key.startswith("$"):
                return f"{where}: operator {key!r} is not supported; {CONTAINMENT}"
            found = operator_error(value, f"{where}.{key}")
            if found:
                return found
    elif isinstance(filters, list):
        for position, item in enumerate(filters):
            found = operator_error(item, f"{where}[{position}]")
            if found:
                return found
    return None
