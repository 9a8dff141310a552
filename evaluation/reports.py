"""The leaderboard: every (config, variant) of a collection side by side, as markdown, CSV, JSON and a chart."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkyard.evaluation.estimates import Estimate
from chunkyard.evaluation.metrics import TABLE_METRICS
from chunkyard.evaluation.runner import EvaluationReport, format_estimate

# The runner's headline metrics, then the failure rate and the context the top k costs.
LEADERBOARD_METRICS = (*TABLE_METRICS, "failure_rate_at_20", "context_tokens_at_{k}")
COST_COLUMNS = (
    "chunks",
    "mean_chunk_tokens",
    "tokens_embedded",
    "overlap_overhead",
    "share_over_model_limit",
    "build_seconds",
    "embeddings_per_second",
    "endpoint_tokens",
    "endpoint_requests",
    "endpoint_retries",
    "endpoint_seconds",
)
# An embedding server's usage (`retrieval.embedders.endpoint_settings.EndpointUsage`): shown only when a row has it.
ENDPOINT_COST_COLUMNS = ("endpoint_tokens", "endpoint_requests", "endpoint_retries", "endpoint_seconds")
# The short view printed by `chunkyard demo`: quality headline plus the fair-budget recall.
TIE_BREAKERS = ("mrr_at_{k}", "hit_at_{k}", "iou_at_{k}", "budget_recall_1024")
SUMMARY_METRICS = ("hit_at_{k}", "mrr_at_{k}", "recall_at_{k}", "iou_at_{k}", "budget_recall_1024")
# Metrics that are counts, not fractions (not shown as %).
_RAW_METRICS = ("context_tokens_at_", "budget_chunks_")


def _is_raw(name: str) -> bool:
    return name.startswith(_RAW_METRICS)


@dataclass
class LeaderboardRow:
    config: str
    index: str
    variant: str
    dataset: str
    k: int
    n_questions: int
    estimates: dict[str, Estimate]
    cost: dict[str, float] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    def value(self, metric: str) -> float:
        est = self.estimates.get(metric)
        return est.mean if est is not None else math.nan


@dataclass
class Leaderboard:
    """Rows sorted by `sort_by` (recall@k by default), best first."""

    rows: list[LeaderboardRow]
    k: int
    title: str = "Leaderboard"
    sort_by: str = ""
    notes: list[str] = field(default_factory=list)

    def standing(self) -> str:
        """How clearly the first row leads on `sort_by`: `best`, `tied` (same mean as the next) or
        `within the interval` (the next row's 95% interval reaches the first's mean)."""
        if len(self.rows) < 2:
            return "best"
        first, second = (row.estimates.get(self.sort_by) for row in self.rows[:2])
        if first is None or second is None:
            return "best"
        if first.mean == second.mean:
            return "tied"
        return "within the interval" if second.high >= first.mean else "best"

    def metric_names(self, metrics: Sequence[str] = LEADERBOARD_METRICS) -> list[str]:
        present = {m for r in self.rows for m in r.estimates}
        return [m.format(k=self.k) for m in metrics if m.format(k=self.k) in present]

    def markdown(
        self, metrics: Sequence[str] = LEADERBOARD_METRICS, cost_columns: Sequence[str] = COST_COLUMNS
    ) -> str:
        """The table; `metrics`/`cost_columns` choose the columns (SUMMARY_METRICS for a terminal)."""
        names = self.metric_names(metrics)
        cost_columns = [
            c for c in cost_columns if c not in ENDPOINT_COST_COLUMNS or any(c in r.cost for r in self.rows)
        ]
        lines = [f"## {self.title}", ""]
        if self.rows:
            r0 = self.rows[0]
            lines.append(
                f"Dataset `{r0.dataset}`, {r0.n_questions} questions, top {self.k}. Fractions in %, "
                f"with 95% bootstrap confidence intervals over questions. Sorted by `{self.sort_by}`."
            )
            lines.append("")
        header = ["config", "variant", *names, *cost_columns, "p95 ms"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for row in self.rows:
            cells = [row.config, row.variant]
            for name in names:
                est = row.estimates.get(name)
                if est is None:
                    cells.append("–")
                elif _is_raw(name):
                    cells.append(f"{est.mean:.0f}")
                else:
                    cells.append(format_estimate(est))
            for column in cost_columns:
                value = row.cost.get(column)
                if value is None:
                    cells.append("–")
                elif column in ("overlap_overhead", "share_over_model_limit"):
                    cells.append(f"{100 * value:.1f}%")
                elif column == "mean_chunk_tokens":
                    cells.append(f"{value:.0f}")
                elif column == "endpoint_seconds":
                    cells.append(f"{value:,.1f}")
                else:
                    cells.append(f"{value:,.0f}")
            p95 = row.latency.get("p95_ms")
            cells.append("–" if p95 is None or math.isnan(p95) else f"{p95:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
        if self.notes:
            lines.append("")
            lines.extend(f"- {note}" for note in self.notes)
        return "\n".join(lines) + "\n"

    def records(self) -> list[dict[str, Any]]:
        out = []
        for row in self.rows:
            record: dict[str, Any] = {
                "config": row.config,
                "index": row.index,
                "variant": row.variant,
                "dataset": row.dataset,
                "k": row.k,
                "n_questions": row.n_questions,
            }
            for name, est in row.estimates.items():
                record[name] = est.mean
                record[f"{name}_ci_low"] = est.low
                record[f"{name}_ci_high"] = est.high
            for name, value in row.cost.items():
                record[f"cost_{name}"] = value
            for name, value in row.latency.items():
                record[f"latency_{name}"] = value
            out.append(record)
        return out

    def csv(self) -> str:
        records = self.records()
        columns: list[str] = []
        for record in records:
            columns.extend(c for c in record if c not in columns)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for record in records:
            writer.writerow({c: _csv_value(record.get(c)) for c in columns})
        return buffer.getvalue()

    def json(self) -> str:
        return json.dumps(
            {
                "title": self.title,
                "k": self.k,
                "sort_by": self.sort_by,
                "notes": self.notes,
                "rows": self.records(),
            },
            indent=2,
            sort_keys=False,
            default=float,
        )

    def plot_png(self, path: str | Path) -> Path:
        """Recall@k against the context tokens it costs (mean tokens of the top k), one point per
        config and variant; budget recall at 1024/2048 tokens drawn at those x positions."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        recall_key, tokens_key = f"recall_at_{self.k}", f"context_tokens_at_{self.k}"
        fig, ax = plt.subplots(figsize=(13, 6.5), dpi=110)
        fig.subplots_adjust(left=0.07, right=0.74, bottom=0.1, top=0.93)
        variants = sorted({r.variant for r in self.rows})
        configs = sorted({r.config for r in self.rows})
        markers = dict(zip(variants, "osD^vP*X<>", strict=False))
        palette = plt.get_cmap("tab20")
        colors = {c: palette(i % 20) for i, c in enumerate(configs)}
        for row in self.rows:
            x, y = row.value(tokens_key), row.value(recall_key)
            if math.isnan(x) or math.isnan(y):
                continue
            est = row.estimates[recall_key]
            ax.errorbar(
                x,
                100 * y,
                yerr=[[100 * (y - est.low)], [100 * (est.high - y)]],
                fmt=markers.get(row.variant, "o"),
                color=colors[row.config],
                capsize=2,
                alpha=0.85,
            )
            for budget in (1024, 2048):
                value = row.value(f"budget_recall_{budget}")
                if not math.isnan(value):
                    ax.scatter(
                        [budget],
                        [100 * value],
                        marker=markers.get(row.variant, "o"),
                        s=14,
                        alpha=0.5,
                        color=colors[row.config],
                    )
        from matplotlib.lines import Line2D

        config_handles = [Line2D([], [], color=colors[c], marker="o", linestyle="", label=c) for c in configs]
        variant_handles = [
            Line2D([], [], color="black", marker=markers[m], linestyle="", label=m) for m in variants
        ]
        first = ax.legend(
            handles=config_handles,
            title="config",
            fontsize=7,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
        )
        ax.add_artist(first)
        ax.legend(
            handles=variant_handles,
            title="variant",
            fontsize=7,
            title_fontsize=8,
            loc="lower left",
            bbox_to_anchor=(1.01, 0.0),
        )
        ax.set_xlabel(
            f"context tokens (cl100k): mean of the top {self.k}; small markers at 1024/2048: recall within that budget"
        )
        ax.set_ylabel(f"recall@{self.k} (% of reference characters)")
        ax.set_title(self.title)
        ax.grid(alpha=0.3)
        fig.savefig(path)
        plt.close(fig)
        return path

    def write(self, prefix: str | Path) -> list[Path]:
        """`<prefix>.md`, `.csv`, `.json` and `.png`."""
        prefix = Path(prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        written = []
        for suffix, text in ((".md", self.markdown()), (".csv", self.csv()), (".json", self.json())):
            target = prefix.with_name(prefix.name + suffix)
            target.write_text(text, encoding="utf-8")
            written.append(target)
        written.append(self.plot_png(prefix.with_name(prefix.name + ".png")))
        return written


def _csv_value(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def leaderboard(
    reports: Sequence[EvaluationReport],
    *,
    sort_by: str | None = None,
    title: str = "Leaderboard",
    notes: Sequence[str] = (),
) -> Leaderboard:
    """One row per (report, variant), best `sort_by` first (default recall@k)."""
    if not reports:
        return Leaderboard([], 5, title, sort_by or "recall_at_5", list(notes))
    k = reports[0].k
    sort_key = sort_by or f"recall_at_{k}"
    rows = []
    for report in reports:
        for variant, summary in report.summaries.items():
            rows.append(
                LeaderboardRow(
                    config=report.config,
                    index=report.index,
                    variant=variant,
                    dataset=report.dataset,
                    k=report.k,
                    n_questions=report.n_questions,
                    estimates=dict(summary.overall),
                    cost=dict(report.cost),
                    latency=dict(report.latency.get(variant, {})),
                )
            )
    # Ties on `sort_by` (common on small hand-written sets) go to the better MRR, then hit, IoU and
    # budget recall: the first row is what `chunkyard index` suggests searching.
    order = dict.fromkeys([sort_key, *(m.format(k=k) for m in TIE_BREAKERS)])
    rows.sort(key=lambda r: tuple(_descending(r.value(metric)) for metric in order))
    return Leaderboard(rows, k, title, sort_key, list(notes))


def _descending(value: float) -> float:
    """A sort key putting larger values first and missing (NaN) ones last."""
    return math.inf if math.isnan(value) else -value
