"""`chunkyard lag`: how far each published index is behind its collection's documents (`retrieval.indexing.lag`)."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    lag = sub.add_parser(
        "lag", help="documents each index is behind, and its oldest unindexed change", parents=[common]
    )
    lag.add_argument("collection", nargs="?", help="one collection (default: every index)")
    lag.add_argument("--json", action="store_true", help="as JSON")


def cmd_lag(args: argparse.Namespace) -> int:
    from chunkyard.retrieval.indexing.lag import index_lags
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import database_url

    declared = declared_indexes()
    store = Store(database_url())
    try:
        store.migrate()  # a database nothing was indexed into yet has no index, not a missing table
        lags = index_lags(store, args.collection)
        # the project's state follows chunkyard.yaml: an index whose config or collection left it is
        # not listed (its tables stay until dropped), only counted
        gone = [lag.index for lag in lags if declared is not None and lag.index not in declared]
        lags = [lag for lag in lags if lag.index not in gone]
        infos = {lag.index: store.indexes.info(lag.index) or {} for lag in lags}
    finally:
        store.close()
    analysis = {  # published indexes only: an unpublished one has analysed nothing yet
        name: {key: info.get(key) if info.get("version") else None for key in ("analyzers", "languages")}
        for name, info in infos.items()
    }
    if args.json:
        print(json.dumps({lag.index: {**lag.as_dict(), **analysis[lag.index]} for lag in lags}, indent=2))
        return 0
    if not lags:
        print("No index yet: `chunkyard index` builds them.")
    if gone:
        print(
            f"({len(gone)} built index{'es' if len(gone) != 1 else ''} no longer in chunkyard.yaml not shown: {', '.join(gone)})"
        )
    for lag in lags:
        facts = lag.as_dict()
        oldest = facts["oldest_unindexed_change"]
        print(
            f"{lag.index}: {lag.documents_behind} document(s) behind ({facts['documents_added']} added, "
            f"{facts['documents_changed']} changed, {facts['documents_deleted']} deleted)"
            + (f", oldest unindexed change {oldest}" if oldest else "")
        )
        if analysis[lag.index]["analyzers"]:  # published: how its text and queries are analysed
            languages = analysis[lag.index]["languages"] or {}
            shares = ", ".join(f"{lang} {100 * share:.0f}%" for lang, share in languages.items())
            print(
                f"  BM25 analysis: {'+'.join(analysis[lag.index]['analyzers'])}"
                + (f" ({shares})" if shares else "")
            )
    return 0


def declared_indexes() -> set[str] | None:
    """The indexes chunkyard.yaml declares now (None outside a project: every registered one counts)."""
    from chunkyard.retrieval.settings.config_checks import load_index_specs
    from chunkyard.retrieval.settings.project import ProjectError

    try:
        return {str(spec.name) for spec in load_index_specs()}
    except ProjectError:
        return None
