"""One search option's schema (`OptionSchema`): its default, bounds, help, its check, and its command-line flag."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from chunkyard.retrieval.settings.filters import operator_error

Kind = Literal["int", "float", "bool", "choice", "name", "object", "reranker"]
# A `name` option: something the server holds under this name, never a path or other text.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class SearchError(ValueError):
    """Bad search input (unknown mode, k out of range, bad filters): the message names the field."""


@dataclass(frozen=True)
class OptionSchema:
    """What the service, the CLI and the client need to know about one option."""

    name: str
    default: Any
    help: str
    kind: Kind
    ge: float | None = None
    le: float | None = None
    choices: tuple[str, ...] = ()
    index_default: bool = False  # overrides a setting of the index config (not passed to a coarse index)
    request_le: float | None = None  # a tighter upper bound for requests (HTTP, CLI) than the library's
    flags: tuple[str, ...] = ()
    error: str = ""

    @property
    def nullable(self) -> bool:
        return self.default is None

    @property
    def request_bound(self) -> float | None:
        """The upper bound a request (HTTP body, CLI flag) is held to."""
        return self.request_le if self.request_le is not None else self.le

    def check(self, value: Any) -> Any:
        """The value, normalised (floats as float), or SearchError naming the option."""
        if value is None:  # unset: the alias's, the index's or the built-in default
            return None
        where = self.name
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int) or not self.ge <= value <= self.le:
                raise SearchError(
                    f"{where}: must be an integer between {self.ge:g} and {self.le:g}, got {value!r}"
                )
            return value
        if self.kind == "float":
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not self.ge <= value <= self.le
            ):
                raise SearchError(
                    f"{where}: must be a number between {self.ge:g} and {self.le:g}, got {value!r}"
                )
            return float(value)
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise SearchError(f"{where}: must be true or false, got {value!r}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise SearchError(f"{where}: unknown {value!r}; expected one of {self.choices}")
            return value
        if self.kind == "name":
            if not isinstance(value, str) or not NAME.fullmatch(value):
                raise SearchError(f"{where}: {self.error}, got {value!r}")
            return value
        if self.kind == "object":
            if not isinstance(value, dict):
                raise SearchError(f"{where}: {self.error}")
            refused = operator_error(value, where)  # `$regex` & co. would match nothing, silently
            if refused:
                raise SearchError(refused)
            return value
        # reranker: a name, or an object with `score(query, texts)`; False means none
        if value is False:
            return None
        if hasattr(value, "score") or (isinstance(value, str) and value.strip()):
            return value
        raise SearchError(f"{where}: {self.error}")

    def argument(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        """This option's command-line flag (`--context-weight 0.4`): its names and argparse settings,
        absent from the namespace unless given."""
        names = (*self.flags, "--" + self.name.replace("_", "-"))
        default_text = "" if self.default is None else f" (default: {self.default})"
        settings: dict[str, Any] = {
            "dest": self.name,
            "default": argparse.SUPPRESS,
            "help": self.help + default_text,
        }
        if self.kind == "bool":
            settings["action"] = "store_true" if self.default is False else argparse.BooleanOptionalAction
        elif self.kind == "choice":
            settings["choices"] = self.choices
        elif self.kind in ("int", "float"):
            settings["type"] = _bounded(self)
            settings["help"] = f"{self.help} ({self.ge:g}-{self.request_bound:g}){default_text}"
        elif self.kind == "name":
            settings["type"] = _name(self)
        else:
            settings["type"] = _json_object(self) if self.kind == "object" else str
        return names, settings


def option_field(default: Any, help: str, kind: Kind, **schema: Any) -> Any:
    """A field that is unset (None) until given; `default` is what `resolve` fills in."""
    return field(
        default=None, metadata={"option": {"default": default, "help": help, "kind": kind, **schema}}
    )


def _bounded(schema: OptionSchema) -> Any:
    """An argparse type for a numeric option: its request bounds, with the same message as the service."""
    convert = int if schema.kind == "int" else float

    def parse(text: str) -> int | float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if convert is int else 'a number'}"
            ) from None
        if not schema.ge <= value <= schema.request_bound:
            raise argparse.ArgumentTypeError(
                f"must be between {schema.ge:g} and {schema.request_bound:g}, got {text}"
            )
        return value

    parse.__name__ = schema.kind
    return parse


def _name(schema: OptionSchema) -> Any:
    """An argparse type for a name option, with the service's message."""

    def parse(text: str) -> str:
        if not NAME.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{schema.error}, got {text!r}")
        return text

    parse.__name__ = "name"
    return parse


def _json_object(schema: OptionSchema) -> Any:
    """An argparse type for a JSON object option (`--filters '{"lang": "en"}'`), in the service's wording."""

    def parse(text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{schema.error}; not JSON ({exc.msg}): {text!r}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f'{schema.error}, e.g. \'{{"lang": "en"}}\'; got {text!r}')
        return value

    parse.__name__ = "JSON object"
    return parse
