"""`chunkyard search`: one query, through the project's running service or in-process, for people
(rounded scores, integer ranks, page or slide and heading path) or for programs (`--json`: the
HTTP response's shape, `POST /v1/search`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from chunkyard.chunking.documents.printable import printable
from chunkyard.retrieval.query.results import SearchResult

TEXT_CHARS = 300
SLOW_IN_PROCESS_S = 2.0  # an in-process search this slow gets the hint to run `chunkyard serve`


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    from chunkyard.retrieval.settings.options import SearchOptions

    search = sub.add_parser("search", help="query an index", parents=parents)
    search.add_argument("query", help="the question or keywords")
    search.add_argument(
        "--index",
        default=None,
        help="collection/config or a serving alias (a bare config: the project's collection); default: "
        "the project's default index (its only collection's index, the one `chunkyard add` chose)",
    )
    search.add_argument(
        "--no-service", action="store_true", help="search in-process even when `chunkyard serve` runs"
    )
    search.add_argument(
        "--json", action="store_true", help="print the HTTP API's response body (POST /v1/search)"
    )
    SearchOptions.add_arguments(search)  # one flag per search option: -k, --mode, --context-weight, ...


def cmd_search(args: argparse.Namespace) -> int:
    from chunkyard.orchestration.cli_alias import index_or_alias
    from chunkyard.retrieval.api import service_file
    from chunkyard.retrieval.settings.config import default_collection
    from chunkyard.retrieval.settings.default_index import default_index
    from chunkyard.retrieval.settings.options import SearchOptions
    from chunkyard.retrieval.store.db import chunkyard_home

    options = SearchOptions.from_arguments(args)
    # none named: the project's default index; a bare config name: a config of the project's collection
    index = str(default_index()) if args.index is None else index_or_alias(args.index, default_collection())
    started = time.perf_counter()
    running = None if args.no_service else service_file.running(chunkyard_home())
    if running is not None:
        from chunkyard.retrieval.integrations.client import Client

        with Client(running["url"]) as client:
            body = client.search_response(args.query, index=index, options=options)
        results = [SearchResult.from_dict(item) for item in body["results"]]
        path = f"via the running service {running['url']} (pid {running['pid']})"
    else:
        from chunkyard.retrieval.query import Searcher

        # one query: BM25 from the postings in Postgres (loading the in-memory copy would cost more)
        results, plan = Searcher(bm25_backend="sql").search_with_plan(args.query, index, options)
        body = {  # the HTTP response's shape (retrieval.api.service.SearchResponse)
            "index": results[0].index if results else index,
            "mode": plan.mode,
            "k": plan.k,
            "results": [result.as_dict() for result in results],
            "took_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        path = (
            "in-process (--no-service)"
            if args.no_service
            else "in-process (no running service: `chunkyard serve` keeps the model warm)"
        )
    took = time.perf_counter() - started
    if args.json:
        print(json.dumps(body, ensure_ascii=False, indent=2))
        return 0
    total = process_seconds()
    print(f"{printable(str(index))}: {counted(len(results), 'result')} in {timings(total, took)}, {path}")
    if running is None and took >= SLOW_IN_PROCESS_S:
        print(
            f"hint: {took:.1f} s of it loading the model and the index; `chunkyard serve` keeps them loaded, "
            "and `chunkyard search` then goes through it (0.8 s a call here: benchmarks/results/first_run.md)",
            file=sys.stderr,
        )
    for hit in results:  # names and text escaped: a document cannot drive the terminal
        print(
            f"{hit.rank}. {printable(hit.doc_id + where(hit))} [{hit.start}:{hit.end}]  {scores(hit.scores)}"
        )
        print(f"   {shown(hit, sys.stdout.isatty())}")
    return 0


def shown(hit: SearchResult, bold: bool = False) -> str:
    """The hit's snippet around its best highlight (bold on a terminal); the chunk's start without one."""
    if not hit.snippet:  # text escaped: a document cannot drive the terminal; bold is ours
        text = " ".join(hit.text.split())
        return f"{printable(text[:TEXT_CHARS])}{'...' if len(text) > TEXT_CHARS else ''}"
    snippet = printable(hit.snippet)
    if not bold or not hit.highlights:
        return snippet
    marked = printable(" ".join(hit.highlights[0].text.split()))
    return snippet.replace(marked, f"\033[1m{marked}\033[0m", 1)


def process_seconds() -> float:
    """Seconds since this process started (Python's start-up and imports included)."""
    import psutil

    return max(time.time() - psutil.Process().create_time(), 0.0)


def timings(total: float, searching: float) -> str:
    """`3.02 s (2.65 s starting, 0.37 s searching)`: parts that add up to the whole command."""
    searching = min(searching, total)
    return f"{total:.2f} s ({total - searching:.2f} s starting, {searching:.2f} s searching)"


def counted(n: int, noun: str) -> str:
    """`1 result`, `2 results`: a count in plain words."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def where(hit: SearchResult) -> str:
    """` (page 3)`, ` (slides 2-3; Setup › Install)`: where in its document a chunk is, when known."""
    meta = hit.metadata or {}
    parts = []
    for unit in ("page", "slide"):
        first, last = meta.get(unit), meta.get(f"{unit}_end")
        if first is None:
            continue
        if last in (None, first):
            parts.append(f"{unit} {first}")
            continue
        at = getattr(hit, unit)  # the highlight's page or slide, in a chunk that crosses several
        parts.append(f"{unit}s {first}-{last}" + (f", highlight on {unit} {at}" if at is not None else ""))
    headings = [str(h) for h in meta.get("heading_path") or [] if h]
    if headings:
        parts.append(" › ".join(headings))
    return f" ({'; '.join(parts)})" if parts else ""


def scores(values: dict[str, float]) -> str:
    """Scores rounded to 3 decimals, ranks as integers (`dense 0.512, bm25 3.21; ranks: dense 1, bm25 2`)."""
    ranks = {k.removesuffix("_rank"): int(v) for k, v in values.items() if k.endswith("_rank")}
    rest = {k: v for k, v in values.items() if not k.endswith("_rank")}
    text = ", ".join(f"{name} {value:.3f}" for name, value in sorted(rest.items()))
    if ranks:
        text += "; ranks: " + ", ".join(f"{name} {rank}" for name, rank in sorted(ranks.items()))
    return text


def suggestion(
    collection: str,
    best: tuple[str | None, str | None] | None,
    standing: tuple[str, str] | None = None,
) -> str:
    """What to type next after `chunkyard index`: the leaderboard's best (index, variant) when there is
    one, else the collection's first index config."""
    from chunkyard.evaluation.runner import SERVED_VARIANT, configured_reranker, parse_variant
    from chunkyard.retrieval.settings.config import load_collections, load_index_configs
    from chunkyard.retrieval.settings.options import DEFAULT_MODE

    index, variant = best or (None, None)
    if not index or not index.startswith(f"{collection}/"):
        from chunkyard.retrieval.settings.default_index import collection_default

        chosen = load_collections()[collection]
        index, variant = (f"{collection}/{collection_default(chosen)}" if chosen.indexes else None), None
    if index is None:
        return ""
    flags = ""
    if variant and variant != SERVED_VARIANT:  # served: what a search naming no option runs
        config = load_index_configs().get(index.split("/", 1)[1])  # `+rerank` ran the config's reranker
        mode, reranker = parse_variant(variant, configured_reranker(config.rerank) if config else None)
        flags = (f" --mode {mode}" if mode != DEFAULT_MODE else "") + (
            f" --rerank {reranker}" if reranker else ""
        )
    ranked = ""
    if best and best[0] == index:
        how, runner_up = standing or ("best", "")
        ranked = {
            "tied": f" (tied first on the leaderboard with {runner_up})",
            "within the interval": f" (first on the leaderboard, but {runner_up} is within its confidence interval)",
        }.get(how, " (the leaderboard's best)")
    named = "" if index == _default_or_none() else f" --index {index}"  # the default needs no name
    return f'\nSearch it: chunkyard search "your question"{named}{flags}{ranked}'


def _default_or_none() -> str | None:
    from chunkyard.retrieval.settings.default_index import NoDefaultIndex, default_index

    try:
        return str(default_index())
    except NoDefaultIndex:
        return None
