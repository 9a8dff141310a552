"""`chunkyard index`: materialise a collection's assets as one Dagster run, then summarise what it did."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

from chunkyard.chunking.documents.printable import printable
from chunkyard.orchestration import cli_check, cli_search, run_report
from chunkyard.orchestration.cli_errors import RuntimeFailure
from chunkyard.orchestration.cli_session import carried_from_parent, in_own_session, run_in_own_session
from chunkyard.orchestration.progress import RunProgress
from chunkyard.retrieval.settings.config_checks import CheckedProject, check_index_run
from chunkyard.retrieval.settings.project import ParsedFiles, parsed_files, reuse_parsed


@dataclass(frozen=True)
class HandOver:
    """What `chunkyard index` hands the child that runs it: the checked project, and the settings
    files' parses (each reused there only while its file is unchanged)."""

    checked: CheckedProject
    parsed: ParsedFiles


def _print(message: str = "", end: str = "\n") -> None:
    print(message, end=end, flush=True)


def cmd_index(args: argparse.Namespace) -> int:
    """Materialise the collection's assets as a real run of the project's Dagster instance."""

    # The settings files are read and checked once, here at the edge, before anything runs (exit 2 on a
    # problem); the child that runs the index gets the checked project from this process, not the files.
    carried = carried_from_parent() if in_own_session() else None
    if isinstance(carried, HandOver):
        reuse_parsed(carried.parsed)  # the files' parses too, for what the run reads (the default index)
        checked = carried.checked
    else:
        name = getattr(args, "name", None) or getattr(args, "collection", None)
        checked = check_index_run(cli_check.chosen_collections(name))
    chosen = checked.chosen
    if getattr(args, "dry_run", False):
        cli_check.print_plan(list(checked.planned))
        return 0
    if not in_own_session():  # the run in a child of its own session: Ctrl-C reaches only that child
        return run_in_own_session(args.argv, carried=HandOver(checked, parsed_files()))
    started = time.perf_counter()
    from chunkyard.assets.definitions import build_definitions, index_job
    from chunkyard.assets.keys import collection_keys, collection_prefix
    from chunkyard.assets.runs import creator_tags, sweep_dead_runs
    from chunkyard.orchestration.index_writers import WriterBusy, run_tags, sole_writer
    from chunkyard.orchestration.instance import get_instance

    instance = get_instance()
    swept = sweep_dead_runs(instance)
    if swept:
        _print(f"Marked {len(swept)} dead run(s) as failed: {', '.join(swept)}")
    defs = build_definitions(database_url=os.environ["DATABASE_URL"], checked=checked)
    graph = defs.resolve_asset_graph()
    keys = [k for c in chosen for k in collection_keys(c, graph.get_all_asset_keys())]
    prefixes = {c: collection_prefix(c) for c in chosen}
    wait = not getattr(args, "no_wait", False)
    try:  # one writer per collection: after any run of it in flight (the daemon's or another CLI's)
        with sole_writer(instance, os.environ["DATABASE_URL"], prefixes, wait=wait, say=_print):
            _print(
                f"Indexing {', '.join(chosen)}: {len(keys)} assets (Dagster home {os.environ['DAGSTER_HOME']})"
            )
            progress = RunProgress(total=len(keys), stream=sys.stdout)
            with progress:
                # the collection's named job (`index_mine`, the name on the UI's runs page), in this process
                result = index_job(defs, chosen).execute_in_process(
                    instance=instance,
                    asset_selection=keys if len(chosen) > 1 else None,
                    tags={**creator_tags(), "chunkyard/trigger": "cli", **run_tags(chosen), **progress.tags},
                    # Step events stay in the event log (`chunkyard ui`); the progress display and the
                    # summary below show the steps and their errors.
                    run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
                    raise_on_error=False,
                )
    except WriterBusy as exc:
        print(f"chunkyard index: {exc}; not started (without --no-wait it waits)", file=sys.stderr)
        return 1
    if run_report.interrupted(result.all_events):
        raise KeyboardInterrupt  # one line from main(), not the interrupted step's error
    summary = run_summary(result)
    for line in summary["failures"]:
        if "DagsterAssetCheckFailedError" not in line:  # a blocking check: listed below with its numbers
            _print(f"  ! {printable(line)}")
    failed_checks = run_report.failed_checks(result.all_events)
    for check in failed_checks:
        _print(f"  ! {printable(check.line())}")
    succeeded = result.success and not any(check.error for check in failed_checks)
    notes = run_report.evaluation_notes(result.all_events)
    _print("".join(f"  note: {printable(note)}\n" for note in notes), end="")
    skipped = summary["skipped_files"]
    if skipped:
        total = max(summary["skipped_total"], len(skipped))
        _print(f"Files skipped ({total}):")
        for path, reason in skipped:
            _print(f"  - {printable(path)}: {printable(reason)}")  # whole, one line each
        if total > len(skipped):  # past the documents step's table (its first rows per collection)
            _print(f"  ... and {total - len(skipped)} more, not listed")
    _print()
    _print(
        f"Run {result.run_id} of job {result.job_def.name} {'succeeded' if succeeded else 'FAILED'} in "
        f"{time.perf_counter() - started:.1f} s (visible in `chunkyard ui`)."
    )
    for collection, counts in sorted(summary["documents"].items()):  # every collection indexed
        _print(
            f"Documents: {counts}"
            if len(summary["documents"]) == 1
            else f"Documents ({collection}): {counts}"
        )
    for line in run_report.count_lines(summary):
        _print(line)
    if summary["unchanged"]:  # `assets.unchanged`: the same inputs as their last run
        _print(
            f"Evaluation: unchanged, skipped ({', '.join(summary['unchanged'])}: the published indexes, "
            "the eval set and the settings are those of the last evaluation)"
        )
    board = summary.get("leaderboard")
    if board:
        _print()
        _print(board)
        if summary.get("full_table"):
            _print(f"\nAll metrics with cost: {summary['full_table']}")
        if summary.get("chart"):
            _print(f"Chart: {summary['chart']}")
    if succeeded:
        _print(cli_search.suggestion(chosen[0], summary.get("best"), summary.get("standing")))
        return 0
    errors = [check for check in failed_checks if check.error]
    if errors:  # an error-level check failed (a blocking one stopped the steps after it)
        raise RuntimeFailure(
            f"{len(errors)} check(s) failed, first {errors[0].name} on {errors[0].asset}",
            run_report.hint(failed_checks),
        )
    raise RuntimeFailure(
        f"run {result.run_id} failed: {summary['failures'][0] if summary['failures'] else 'see the UI'}",
        run_report.failure_hint(summary["failures"]),
    )


def run_summary(result) -> dict:
    """Counts, skipped files and the leaderboard from a run's materialisation metadata."""
    summary: dict = {
        "computed": 0,
        "reused": 0,
        "staged": 0,
        "rechunked": [],  # per config: the documents added or changed since its index's last publish
        "kept": 0,
        "documents": {},  # collection (asset key prefix) -> its documents step's counts
        "failures": [],
        "skipped_files": [],
        "skipped_total": 0,  # files skipped, listed in `skipped_files` or not
        "unchanged": [],  # evaluation and leaderboard assets that evaluated nothing: inputs unchanged
    }
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error  # type: ignore[union-attr]
            while error is not None and error.cause is not None:  # Dagster's wrapper -> the step's error
                error = error.cause
            message = " ".join(error.message.split()) if error else "failed"
            summary["failures"].append(f"{event.step_key}: {message}")
        if not event.is_step_materialization:
            continue
        materialization = event.step_materialization_data.materialization
        key = materialization.asset_key.path
        meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
        if "skipped" in meta and key[-1] in ("evaluation", "leaderboard"):
            summary["unchanged"].append("/".join(key))
        if key[-1] == "chunks":
            summary["staged"] += int(meta.get("chunks_staged", 0) or 0)
            summary["kept"] += int(meta.get("chunks_kept", 0) or 0)
            summary["rechunked"].append(
                sum(int(meta.get(f"documents_{k}", 0) or 0) for k in ("added", "changed"))
            )
        elif key[-1] == "embeddings":
            summary["computed"] += int(meta.get("embeddings_computed", 0) or 0)
            summary["reused"] += int(meta.get("embeddings_reused", 0) or 0)
        elif key[-1] == "documents":
            summary["documents"][key[0]] = ", ".join(
                f"{meta.get(f'documents_{k}', 0)} {k}"
                for k in ("added", "changed", "deleted", "unchanged", "failed")
            )
            summary["skipped_files"].extend(_failure_rows(materialization.metadata.get("failures")))
            summary["skipped_total"] += int(meta.get("documents_failed", 0) or 0)
        elif key[-1] == "leaderboard":
            summary["leaderboard"] = meta.get("summary") or meta.get("leaderboard")
            summary["best"] = (meta.get("best_index"), meta.get("best_variant"))
            summary["standing"] = (meta.get("best_standing") or "best", meta.get("runner_up") or "")
            summary["chart"] = meta.get("chart_path")
            summary["full_table"] = meta.get("markdown_path")
    return summary


def _failure_rows(table: object) -> list[tuple[str, str]]:
    """(file, reason) of each row of the documents asset's failures table (typed records, none when absent)."""
    from dagster import TableMetadataValue

    if not isinstance(table, TableMetadataValue):
        return []
    return [(str(row.data["file"]), str(row.data["reason"])) for row in table.records]
