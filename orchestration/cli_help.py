"""The `chunkyard` command line by the ecosystem's conventions: `--version`, help on a bare command, a
description on every command, usage errors as one line plus a `--help` hint, JSON options checked.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line and a hint instead of the whole usage block."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def, override]
        """As argparse's, but an unknown argument is reported by the command it was given to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            _chosen(self, parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\nhint: `{self.prog} --help` describes every argument\n")


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest command `parsed` chose (`chunkyard alias set`), for its own error line."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(parsed, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], parsed)
    return parser


def version() -> str:
    try:
        return f"chunkyard {metadata.version('chunkyard')}"
    except metadata.PackageNotFoundError:  # a source tree on sys.path without an install
        return "chunkyard (not installed)"


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=version(), help="print the version and exit")


def describe_commands(parser: argparse.ArgumentParser) -> None:
    """Every subcommand without a description gets its one-line help as one (`chunkyard X --help`)."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, command in action.choices.items():
            text = helps.get(name)
            if command.description is None and text:
                command.description = text[0].upper() + text[1:] + "."
            describe_commands(command)


def commands(
    parser: argparse.ArgumentParser, prefix: str = "chunkyard"
) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its full name (`chunkyard alias set`), the root included."""
    found = {prefix: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                found.update(commands(command, f"{prefix} {name}"))
    return found


def print_help_when_bare(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    """`chunkyard` alone: the help on stdout (what to type next), not a usage error."""
    if argv:
        return False
    parser.print_help(sys.stdout)
    return True
