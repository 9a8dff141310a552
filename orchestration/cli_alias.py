"""`chunkyard alias set/show/rollback`: pin what a serving alias answers from, or return to its last target."""

from __future__ import annotations

import argparse
import json

from chunkyard.orchestration.cli_errors import UsageError


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`alias set|show|rollback` under the command's subparsers."""
    from chunkyard.retrieval.settings.options import SearchOptions

    alias = sub.add_parser("alias", help="serving aliases: set, show, roll back", parents=[common])
    actions = alias.add_subparsers(dest="alias_command", required=True, metavar="ACTION")
    set_ = actions.add_parser(
        "set", help="point an alias at an index; the search flags become its defaults", parents=[common]
    )
    set_.add_argument("name", help="alias name (lowercase, no '/')")
    set_.add_argument("index", help="collection/config (bare config: the project's collection)")
    set_.add_argument("--note", default="", help="why (kept in the alias's history)")
    set_.add_argument(
        "--keep", type=int, default=None, help="earlier targets kept (default $CHUNKYARD_ALIAS_KEEP or 5)"
    )
    SearchOptions.add_arguments(set_)
    show = actions.add_parser("show", help="every alias, or one with its kept targets", parents=[common])
    show.add_argument("name", nargs="?", help="one alias, with its kept targets (default: every alias)")
    show.add_argument("--json", action="store_true", help="as JSON")
    rollback = actions.add_parser("rollback", help="return an alias to its previous target", parents=[common])
    rollback.add_argument("name", help="the alias to roll back")


def _line(target: object) -> str:
    from chunkyard.retrieval.query.aliases import AliasTarget

    assert isinstance(target, AliasTarget)
    options = " ".join(f"{key}={value}" for key, value in sorted(target.options.given().items()))
    version = f"v{target.pinned_version}"
    if target.drifted:
        now = f"v{target.current_version}" if target.current_version else "dropped"
        version += f" (now {now})"
    note = f"  # {target.note}" if target.note else ""
    return f"{target.alias} -> {target.index}@{version} {options} [generation {target.generation}]{note}"


def cmd_alias(args: argparse.Namespace) -> int:
    from chunkyard.retrieval.query import aliases
    from chunkyard.retrieval.settings.config import default_collection
    from chunkyard.retrieval.settings.names import IndexName
    from chunkyard.retrieval.settings.options import SearchOptions
    from chunkyard.retrieval.store import Store

    store = Store()
    store.migrate()
    try:
        if args.alias_command == "set":
            index = IndexName.parse(args.index, default_collection=default_collection())
            options = SearchOptions.from_arguments(args)  # only the flags given are set
            target = aliases.set_alias(store, args.name, index, options, note=args.note, keep=args.keep)
            print(_line(target), flush=True)
        elif args.alias_command == "rollback":
            print(_line(aliases.rollback(store, args.name)), flush=True)
        else:
            targets = aliases.history(store, args.name) if args.name else aliases.list_aliases(store)
            if args.name and not targets:
                raise UsageError(f"alias {args.name!r} does not exist")
            if args.json:
                print(json.dumps([t.as_dict() for t in targets], indent=2), flush=True)
            else:
                current = aliases.get_alias(store, args.name) if args.name else None
                for target in targets:
                    mark = "* " if current is not None and target.generation == current.generation else ""
                    print(mark + _line(target), flush=True)
                if not targets:
                    print("no aliases (chunkyard alias set NAME INDEX --mode ...)", flush=True)
    except aliases.AliasError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        store.close()
    return 0


def index_or_alias(text: str, default_collection: str) -> str:
    """`text` unchanged when it names an alias, else the index it means."""
    import psycopg
    from chunkyard.retrieval.query import aliases
    from chunkyard.retrieval.settings.names import IndexName
    from chunkyard.retrieval.store import Store

    if aliases.could_be_alias(text):
        store = Store()
        try:
            with store.connection() as conn:
                if aliases.resolve(conn, text) is not None:
                    return text
        except psycopg.Error:  # the search itself reports an unreachable database
            pass
        finally:
            store.close()
    return str(IndexName.parse(text, default_collection=default_collection))
