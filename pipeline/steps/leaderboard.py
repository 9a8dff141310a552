"""Step `leaderboard`: every evaluated index of a collection compared, written as files and a chart."""

from __future__ import annotations

import base64
from collections.abc import Sequence

from chunkyard.evaluation.reports import SUMMARY_METRICS, LeaderboardRow, leaderboard
from chunkyard.evaluation.runner import latest_reports
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import chunkyard_home

# Bump when this module or `evaluation.reports` changes the leaderboard.
CODE_VERSION = "1"


def write_leaderboard(store: Store, collection: str, index_names: Sequence[IndexName]) -> StepReport:
    """The leaderboard of the indexes' latest recorded evaluations (never evaluated: left out),
    written to `<chunkyard home>/reports/<collection>/leaderboard.{md,csv,json,png}`."""
    board = leaderboard(latest_reports(store, list(index_names)))
    prefix = chunkyard_home() / "reports" / collection / "leaderboard"
    written = {path.suffix.lstrip("."): path for path in board.write(prefix)}
    chart = base64.b64encode(written["png"].read_bytes()).decode()
    best = board.rows[0] if board.rows else None  # what `chunkyard index` suggests searching
    return StepReport(
        metadata={
            "indexes": len(index_names),
            **({"best_index": best.index, "best_variant": best.variant} if best else {}),
            # ties called ties: `tied` or `within the interval` of the runner-up, else `best`
            **(
                {
                    "best_standing": board.standing(),
                    "runner_up": _named(board.rows[1] if len(board.rows) > 1 else None),
                }
                if best
                else {}
            ),
        },
        markdown={
            "leaderboard": board.markdown(),
            "chart": f"![leaderboard chart](data:image/png;base64,{chart})",
            # The short view `chunkyard demo` prints.
            "summary": board.markdown(SUMMARY_METRICS, cost_columns=("chunks",)),
        },
        paths={
            "chart_path": str(written["png"]),
            "csv_path": str(written["csv"]),
            "markdown_path": str(written["md"]),
        },
    )


def _named(row: LeaderboardRow | None) -> str:
    """`demo/token-256 bm25`: a row as the summary names it."""
    return f"{row.index} {row.variant}" if row is not None else ""
