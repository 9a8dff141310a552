"""`chunkyard keys create/list/revoke` and `chunkyard audit`: API keys in the project's database, and who changed what."""

from __future__ import annotations

import argparse
import json

from chunkyard.orchestration.cli_errors import UsageError


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`keys create|list|revoke` and `audit` under the command's subparsers."""
    from chunkyard.retrieval.store.api_key import SCOPES
    from chunkyard.retrieval.store.keys import ACTIONS

    keys = sub.add_parser(
        "keys", help="API keys of the query service: create, list, revoke", parents=[common]
    )
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="a new key; its token is printed once", parents=[common])
    create.add_argument("name", help="the key's name (lowercase letters, digits, '-', '_', '.')")
    create.add_argument(
        "--collection",
        action="append",
        default=[],
        metavar="C",
        help="a collection a search key may search, list and read (repeat for more)",
    )
    create.add_argument("--scope", required=True, choices=SCOPES, help="search: its collections; admin: all")
    create.add_argument("--expires", help="30d, 12h, 90m, 2w, or an ISO date/time (default: never)")
    create.add_argument(
        "--rate",
        type=float,
        default=None,
        help="requests per second (0: no limit; default $CHUNKYARD_KEY_RATE)",
    )
    create.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="searches at once (0: no limit; default $CHUNKYARD_KEY_CONCURRENCY)",
    )
    listing = actions.add_parser("list", help="every key and its status (never a token)", parents=[common])
    listing.add_argument("--json", action="store_true", help="as JSON")
    revoke = actions.add_parser(
        "revoke", help="revoke a key (refused everywhere within a second)", parents=[common]
    )
    revoke.add_argument("name", help="the key to revoke")
    audit = sub.add_parser("audit", help="the audit log: alias, promotion and key changes", parents=[common])
    audit.add_argument("--limit", type=int, default=50, help="the newest N entries (default 50)")
    audit.add_argument("--action", choices=ACTIONS, help="only this action")
    audit.add_argument("--target", help="only this alias or key")
    audit.add_argument("--json", action="store_true", help="as JSON, with before and after")


def _key_line(key: object) -> str:
    from chunkyard.retrieval.store.api_key import ApiKey

    assert isinstance(key, ApiKey)
    where = ",".join(key.collections) if key.collections else "all collections"
    limits = []
    if key.rate_per_s is not None:
        limits.append(f"rate {key.rate_per_s:g}/s")
    if key.max_concurrent is not None:
        limits.append(f"concurrency {key.max_concurrent}")
    expires = f" expires {key.expires_at.isoformat(timespec='seconds')}" if key.expires_at else ""
    extra = f" ({', '.join(limits)})" if limits else ""
    return f"{key.name}  {key.scope}  {where}  {key.status()}{expires}{extra}"


def cmd_keys(args: argparse.Namespace) -> int:
    import os

    from chunkyard.retrieval.api.key_admin import create_key
    from chunkyard.retrieval.query.aliases import local_actor
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.api_key import ApiKeyError

    store = Store()
    store.migrate()
    try:
        if args.keys_command == "create":
            key, token = create_key(
                store,
                args.name,
                args.scope,
                args.collection,
                actor=local_actor(),
                expires=args.expires,
                rate_per_s=args.rate,
                max_concurrent=args.concurrency,
            )
            print(f"Created key {_key_line(key)}", flush=True)
            print(f"Token (shown once; send it as X-API-Key or Authorization: Bearer):\n{token}", flush=True)
            if not os.environ.get("CHUNKYARD_API_KEY"):
                print(
                    "note: a service checks keys only when it runs with CHUNKYARD_API_KEY (the bootstrap admin"
                    " key) set; without it the service is open",
                    flush=True,
                )
        elif args.keys_command == "revoke":
            print(f"Revoked key {_key_line(store.keys.revoke(args.name, actor=local_actor()))}", flush=True)
        else:
            keys = store.keys.list()
            if args.json:
                print(json.dumps([key.as_dict() for key in keys], indent=2), flush=True)
            for key in [] if args.json else keys:
                print(_key_line(key), flush=True)
            if not keys and not args.json:
                print("no keys (chunkyard keys create NAME --scope search --collection C)", flush=True)
    except ApiKeyError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        store.close()
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from chunkyard.retrieval.store import Store

    if args.limit < 1:
        raise UsageError(f"--limit: must be at least 1, got {args.limit}")
    store = Store()
    store.migrate()
    try:
        entries = store.audit.entries(limit=args.limit, action=args.action, target=args.target)
    finally:
        store.close()
    if args.json:
        print(json.dumps([entry.as_dict() for entry in entries], indent=2), flush=True)
        return 0
    for entry in entries:
        print(f"{entry.at.isoformat(timespec='seconds')}  {entry.actor}  {entry.action}  {entry.target}"
              f"  {_change(entry.before, entry.after)}", flush=True)  # fmt: skip
    if not entries:
        print("the audit log is empty", flush=True)
    return 0


def _change(before: dict | None, after: dict | None) -> str:
    """One line: an alias's index and generation, or a key's status, before -> after."""

    def brief(state: dict | None) -> str:
        if state is None:
            return "-"
        if "generation" in state:
            return f"{state.get('index')} [generation {state.get('generation')}]"
        return f"{state.get('scope')} {state.get('status')}"

    return f"{brief(before)} -> {brief(after)}"
