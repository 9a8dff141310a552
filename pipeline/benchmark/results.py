"""What `chunkyard eval` reports: the leaderboard, Chroma's published rows beside ours, suggestions, JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkyard.evaluation.estimates import Estimate
from chunkyard.evaluation.reports import SUMMARY_METRICS, Leaderboard
from chunkyard.evaluation.runner import EvaluationReport
from chunkyard.evaluation.tuning import SettingsSuggestion, WeightSuggestion

PROTOCOLS = ("chroma", "full")
# What `--json` reports for protocol chroma: output key -> metric name (k substituted).
CHROMA_KEYS = {
    "recall": "chroma_recall_at_{k}",
    "precision": "chroma_precision_at_{k}",
    "iou": "chroma_iou_at_{k}",
    "hit_at_{k}": "hit_at_{k}",
    "mrr_at_{k}": "mrr_at_{k}",
}
FULL_KEYS = {
    "recall": "recall_at_{k}",
    "precision": "precision_at_{k}",
    "iou": "iou_at_{k}",
    "chroma_precision": "chroma_precision_at_{k}",
    "chroma_iou": "chroma_iou_at_{k}",
    "hit_at_{k}": "hit_at_{k}",
    "mrr_at_{k}": "mrr_at_{k}",
    "recall_at_20": "recall_at_20",
    "budget_recall_1024": "budget_recall_1024",
    "budget_recall_2048": "budget_recall_2048",
    "trimmed_recall_1024": "trimmed_recall_1024",
    "trimmed_recall_2048": "trimmed_recall_2048",
    "context_tokens_at_{k}": "context_tokens_at_{k}",  # in the run's llm_tokenizer
}


# Chroma's report, all-MiniLM-L6-v2 rows (recall, precision, IoU in %), for the reproduction table.
PUBLISHED_MINILM = {
    "chroma-token-250-125": (82.4, 3.6, 3.5),
    "chroma-token-250-0": (77.1, 3.3, 3.3),
    "chroma-token-200-0": (76.6, 4.1, 4.1),
    "chroma-recursive-250-125": (78.7, 4.9, 4.9),
    "chroma-recursive-250-0": (78.5, 5.4, 5.4),
    "chroma-recursive-200-0": (75.7, 6.5, 6.5),
    "chroma-cluster-250": (77.3, 6.1, 6.0),
    "chroma-cluster-200": (75.2, 7.2, 7.2),
}
# The report's best figures with any model (text-embedding-3-large): the bar to beat.
PUBLISHED_BEST = {"recall": 91.9, "iou": 8.0}


@dataclass
class BenchmarkResult:
    """Every evaluated index of one `chunkyard eval` run, with its build figures and suggestions."""

    dataset: str
    protocol: str
    collection: str
    k: int
    reports: list[EvaluationReport]
    board: Leaderboard
    build_reports: dict[str, dict[str, int | float | str]] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    weight_suggestions: dict[str, WeightSuggestion] = field(default_factory=dict)
    settings_suggestions: dict[str, SettingsSuggestion] = field(default_factory=dict)

    def reproduction_markdown(self) -> str:
        """Our dense rows next to the report's all-MiniLM-L6-v2 rows (protocol chroma metrics)."""
        rows = []
        for report in self.reports:
            published = PUBLISHED_MINILM.get(report.config)
            summary = report.summaries.get("dense")
            if published is None or summary is None:
                continue
            est = {n: summary.overall[f"chroma_{n}_at_5"] for n in ("recall", "precision", "iou")}
            rows.append(
                f"| {report.config} | {_pct(est['recall'])} | {published[0]:.1f} | "
                f"{100 * est['recall'].mean - published[0]:+.1f} | {_pct(est['precision'])} | {published[1]:.1f} | "
                f"{_pct(est['iou'])} | {published[2]:.1f} |"
            )
        if not rows:
            return ""
        header = [
            "## Reproduction of Chroma's all-MiniLM-L6-v2 rows (dense, top 5)",
            "",
            "| config | recall (ours, 95% CI) | published | Δ recall | precision (ours) | published | "
            "IoU (ours) | published |",
            "|---|---|---|---|---|---|---|---|",
        ]
        return "\n".join(header + rows) + "\n"

    def weights_markdown(self) -> str:
        if not self.weight_suggestions:
            return ""
        lines = [
            f"## Suggested `hybrid_weighted` dense weight (recall@{self.k}; 2-fold held-out)",
            "",
            "| index | best weight | recall at best | held-out recall | weights chosen per fold | recall by weight |",
            "|---|---|---|---|---|---|",
        ]
        for index, sug in self.weight_suggestions.items():
            by_weight = ", ".join(f"{w:g}: {100 * v:.1f}" for w, v in sug.by_weight.items())
            lines.append(
                f"| {index} | {sug.weight:g} | {100 * sug.by_weight[sug.weight]:.1f} | {100 * sug.held_out:.1f} | "
                f"{', '.join(f'{w:g}' for w in sug.fold_weights)} | {by_weight} |"
            )
        return "\n".join(lines) + "\n"

    def settings_markdown(self) -> str:
        """`--tune` grids: every combination on all questions, and the 2-fold held-out choice."""
        lines = []
        for index, sug in self.settings_suggestions.items():
            names = list(sug.held_out)
            floors = ", ".join(f"{n} ≥ {v:g}" for n, v in sug.floors.items()) or "none"
            lines += [
                f"## Tuned settings of {index} (maximise {sug.metric}; floors on the tuning half: {floors})",
                "",
                f"Best on all questions: `{sug.settings}`. Chosen per half: "
                + ", ".join(f"`{s}`" for s in sug.fold_settings)
                + ". Held out (each half scored with the other half's choice): "
                + ", ".join(f"{n} {_pct(sug.held_out[n])}" for n in names)
                + ".",
                "",
                "| settings | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names),
            ]
            for row in sug.by_settings:
                cells = " | ".join(f"{100 * row[n]:.1f}" for n in names)
                lines.append(f"| `{row['settings']}` | {cells} |")
            lines.append("")
        return "\n".join(lines)

    def misses_markdown(self) -> str:
        """Per index, the questions each variant missed with the spans retrieved instead and the reference."""
        parts = [
            f"## {report.index}: questions missed\n\n{report.misses_markdown()}"
            for report in self.reports
            if report.missed
        ]
        return "\n".join(parts)

    def markdown(self, compact: bool = False) -> str:
        """The report; `compact`: the leaderboard's short view (SUMMARY_METRICS and chunks), which fits
        a terminal; the full one is in the files written."""
        board = (
            self.board.markdown(SUMMARY_METRICS, cost_columns=("chunks",))
            if compact
            else self.board.markdown()
        )
        parts = [board]
        extras = (self.reproduction_markdown(), self.weights_markdown(), self.settings_markdown())
        for extra in (*extras, self.misses_markdown()):
            if extra:
                parts.append(extra)
        return "\n".join(parts)

    def summary_records(self) -> list[dict[str, Any]]:
        """One flat record per (config, variant): the `--json` output."""
        keys = CHROMA_KEYS if self.protocol == "chroma" else FULL_KEYS
        records = []
        for report in self.reports:
            for variant, summary in report.summaries.items():
                record: dict[str, Any] = {
                    "config": report.config,
                    "index": report.index,
                    "variant": variant,
                    "dataset": self.dataset,
                    "protocol": self.protocol,
                    "k": self.k,
                    "n_questions": report.n_questions,
                }
                ci: dict[str, list[float]] = {}
                for out_key, metric in keys.items():
                    est = summary.overall.get(metric.format(k=self.k))
                    if est is None:
                        continue
                    name = out_key.format(k=self.k)
                    record[name] = round(est.mean, 6)
                    ci[name] = [round(est.low, 6), round(est.high, 6)]
                record["ci95"] = ci
                build = self.build_reports.get(report.index, {})
                suggestion = self.weight_suggestions.get(report.index)
                if suggestion is not None:
                    record["suggested_weight"] = suggestion.as_dict()
                tuned = self.settings_suggestions.get(report.index)
                if tuned is not None:
                    record["tuned_settings"] = tuned.as_dict()
                record["embeddings_computed"] = build.get("embeddings_computed")
                record["embeddings_reused"] = build.get("embeddings_reused")
                records.append(record)
        return records


def _pct(est: Estimate) -> str:
    return f"{100 * est.mean:.1f} [{100 * est.low:.1f}, {100 * est.high:.1f}]"
