"""Config-driven assets: every collection and every (collection, index config) pair becomes assets.

Per collection: `[collection, "documents"]` (folder or dataset -> Postgres) and, if it has
questions, `[collection, "leaderboard"]`. Per (collection, config), in group
`collection__config`: `chunks` -> `embeddings` + `bm25` -> `index` (atomic publish) ->
`evaluation`. Assets are thin: each calls one library function and turns its report into
metadata; integrity checks run inside the asset that produced the data (so they always see
this run's staged rows) and show up as asset checks in the UI.

Nothing heavy is imported at module level: the code location loads without torch.
"""

import base64
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets import checks
from assets.versions import code_version, index_settings, safe_name
from orchestration.resources import EmbedderResource, PostgresResource
from retrieval.config import (
    CollectionConfig,
    IndexConfig,
    IndexSpec,
    load_collection_configs,
    load_index_configs,
    project_root,
)

# Strategies that need the embedding model while chunking (they embed pieces to decide cuts).
MODEL_CHUNKING_STRATEGIES = frozenset({"semantic", "cluster", "late", "late_chunking"})
EVALUATION_MODES = ("dense", "bm25", "hybrid")
EVALUATION_K = 5
REGRESSION_TOLERANCE = 0.01
FAILURE_TABLE_ROWS = 200


def _eager() -> AutomationCondition:
    return AutomationCondition.eager()


def _evaluation_condition() -> AutomationCondition:
    # Re-evaluate when the index is republished, or when never evaluated.
    return AutomationCondition.eager() | AutomationCondition.on_missing()


@dataclass
class CollectionAssets:
    """The assets built for one collection, and the keys the sensor and CLI select."""

    collection: CollectionConfig
    assets: list[AssetsDefinition] = field(default_factory=list)
    documents_key: AssetKey | None = None
    # documents + chunks/embeddings/bm25/index of every config: what a document change re-runs.
    indexing_keys: list[AssetKey] = field(default_factory=list)
    evaluation_keys: list[AssetKey] = field(default_factory=list)
    leaderboard_key: AssetKey | None = None

    @property
    def keys(self) -> list[AssetKey]:
        return [k for a in self.assets for k in a.keys]


def group_name(collection: str, config: str) -> str:
    return f"{safe_name(collection)}__{safe_name(config)}"


def index_key(spec: IndexSpec, kind: str) -> AssetKey:
    return AssetKey([safe_name(spec.collection), safe_name(spec.config.name), kind])


def documents_key(collection: str) -> AssetKey:
    return AssetKey([safe_name(collection), "documents"])


def leaderboard_key(collection: str) -> AssetKey:
    return AssetKey([safe_name(collection), "leaderboard"])


def _config_description(spec: IndexSpec, kind: str) -> str:
    config = spec.config
    chunker = ", ".join(f"{k}={v}" for k, v in sorted(config.chunker.items()))
    what = {
        "chunks": "Chunk set (staged; only added/changed documents are re-chunked)",
        "embeddings": "Embeddings of the staged chunks (content-hash cache across configs and runs)",
        "bm25": "BM25 term frequencies of the staged chunks",
        "index": "Atomic publish of staged chunks, vectors and postings (readers see old or new)",
        "evaluation": f"hit@{EVALUATION_K}, MRR@{EVALUATION_K} and span metrics per retrieval mode",
    }[kind]
    return (
        f"{what} for index `{spec.name}`.\n\n{config.description or 'Index config ' + config.name}\n\n"
        f"chunker: {chunker}; model: {config.embedding_model}"
    )


def _config_metadata(spec: IndexSpec) -> dict[str, Any]:
    config = spec.config
    return {
        "index": spec.name,
        "config": config.name,
        "strategy": str(config.chunker.get("strategy")),
        "chunk_size": str(config.chunker.get("size", "")),
        "overlap": str(config.chunker.get("overlap", "")),
        "tokenizer": str(config.chunker.get("tokenizer", "")),
        "embedding_model": config.embedding_model,
        "config_hash": config.config_hash,
    }


def failures_markdown(failures: Sequence[Any], limit: int = FAILURE_TABLE_ROWS) -> str:
    """A markdown table of files that produced no document, with the reason."""
    if not failures:
        return "No failures: every file loaded."
    rows = ["| file | reason |", "| --- | --- |"]
    for failure in failures[:limit]:
        path = str(failure.path).replace("|", "\\|")
        reason = str(failure.reason).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{path}` | {reason} |")
    if len(failures) > limit:
        rows.append(f"| ... | {len(failures) - limit} more |")
    return "\n".join(rows)


def _id_list(ids: Sequence[str], limit: int = 50) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" ... (+{len(ids) - limit})" if len(ids) > limit else "") if ids else "-"


def _metadata_values(report_metadata: dict[str, Any]) -> dict[str, Any]:
    """Report metadata as Dagster metadata: floats stay floats (plotted), long strings become text."""
    values: dict[str, Any] = {}
    for key, value in report_metadata.items():
        if isinstance(value, int | float):  # bool is an int: kept as is
            values[key] = value
        elif isinstance(value, list | tuple):
            values[key] = _id_list([str(v) for v in value])
        else:
            values[key] = MetadataValue.text(str(value))
    return values


# -- documents -------------------------------------------------------------------------------


def load_collection_documents(collection: CollectionConfig) -> tuple[list[Any], list[Any], bool]:
    """(documents, failures, usable): `usable` is False when no folder could be read at all.

    With several folders, document ids are prefixed with the folder's name so they stay unique.
    """
    from chunking.loaders import DocumentFailure, load_folder

    if collection.dataset:
        from evaluation.datasets import load_dataset

        dataset = load_dataset(collection.dataset)
        return list(dataset.documents), [], True
    folders = collection.folder_paths()
    documents: list[Any] = []
    failures: list[Any] = []
    readable = 0
    for folder in folders:
        docs, fails = load_folder(folder, collection.include, collection.exclude)
        prefix = f"{folder.name}/" if len(folders) > 1 else ""
        folder_failed = bool(fails) and fails[0].path == str(folder)
        if not folder_failed:
            readable += 1
        for doc in docs:
            if prefix:
                doc = type(doc)(prefix + doc.id, doc.text, doc.mime_type, doc.title, dict(doc.metadata))
            documents.append(doc)
        for fail in fails:
            if fail.path == str(folder):
                # Keyed by the folder's id prefix, so the store keeps that folder's documents.
                failures.append(DocumentFailure(prefix.rstrip("/") or str(folder), fail.reason))
            else:
                failures.append(DocumentFailure(prefix + fail.path, fail.reason))
    return documents, failures, readable > 0


def build_documents_asset(collection: CollectionConfig) -> AssetsDefinition:
    name = collection.name
    source = (
        f"dataset `{collection.dataset}`"
        if collection.dataset
        else "folders " + ", ".join(f"`{f}`" for f in collection.folders)
    )

    @asset(
        key=documents_key(name),
        group_name=safe_name(name),
        description=(
            f"Documents of collection `{name}` from {source}, hashed (sha256) and synced into Postgres."
            f"\n\n{collection.description}"
        ),
        code_version=code_version(
            "documents",
            {
                "folders": collection.folders,
                "include": collection.include,
                "exclude": collection.exclude,
                "dataset": collection.dataset,
            },
        ),
        kinds={"python", "postgres"},
        metadata={"collection": name, "source": source},
    )
    def documents(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        started = time.perf_counter()
        docs, failures, usable = load_collection_documents(collection)
        for failure in failures:
            context.log.warning(f"{name}: skipped {failure.path}: {failure.reason}")
        store = postgres.store()
        if usable:
            sync = store.sync_documents(name, docs, failures)
            counts = sync.as_metadata()
            added, changed, deleted = sync.added, sync.changed, sync.deleted
        else:
            # No folder readable (missing, unmounted): keep what is stored rather than delete it all.
            kept = len(store.document_hashes(name))
            context.log.warning(
                f"{name}: no documents folder is readable; keeping the {kept} stored documents"
            )
            counts = {
                "documents_added": 0,
                "documents_changed": 0,
                "documents_deleted": 0,
                "documents_unchanged": kept,
                "documents_failed": len(failures),
            }
            added = changed = deleted = []
        return MaterializeResult(
            metadata={
                **counts,
                "documents_total": len(docs),
                "failures": MetadataValue.md(failures_markdown(failures)),
                "added_ids": _id_list(added),
                "changed_ids": _id_list(changed),
                "deleted_ids": _id_list(deleted),
                "seconds": float(time.perf_counter() - started),
            }
        )

    return documents


# -- per index config ------------------------------------------------------------------------


def _needs_model_for_chunking(config: IndexConfig) -> bool:
    return str(config.chunker.get("strategy", "")).lower() in MODEL_CHUNKING_STRATEGIES


def _check(
    asset_key: AssetKey, name: str, result: tuple[bool, dict], severity=AssetCheckSeverity.ERROR
) -> AssetCheckResult:
    passed, metadata = result
    return AssetCheckResult(
        asset_key=asset_key, check_name=name, passed=passed, metadata=metadata, severity=severity
    )


def build_index_assets(
    collection: CollectionConfig, spec: IndexSpec, *, with_evaluation: bool
) -> list[AssetsDefinition]:
    """chunks -> embeddings + bm25 -> index (-> evaluation) for one (collection, config)."""
    config = spec.config
    group = group_name(spec.collection, config.name)
    keys = {kind: index_key(spec, kind) for kind in ("chunks", "embeddings", "bm25", "index", "evaluation")}
    meta = _config_metadata(spec)

    def common(kind: str) -> dict[str, Any]:
        return {
            "key": keys[kind],
            "group_name": group,
            "description": _config_description(spec, kind),
            "code_version": code_version(
                kind, {"collection": spec.collection, **index_settings(config, kind)}
            ),
            "metadata": meta,
        }

    # Only strategies that embed while chunking need the model (and so torch) in this step.
    chunk_resources = {"postgres", "embedder"} if _needs_model_for_chunking(config) else {"postgres"}

    @asset(
        **common("chunks"),
        required_resource_keys=chunk_resources,
        deps=[documents_key(spec.collection)],
        automation_condition=_eager(),
        kinds={"python", "postgres"},
        check_specs=[
            AssetCheckSpec(
                "spans_match_documents",
                asset=keys["chunks"],
                description="Every chunk's text equals document.text[start:end].",
            ),
            AssetCheckSpec("no_empty_chunks", asset=keys["chunks"], description="No empty chunk."),
            AssetCheckSpec(
                "within_model_token_limit",
                asset=keys["chunks"],
                description="No chunk longer than the embedding model's input limit, unless the config "
                "allows truncation (then the share truncated is reported).",
            ),
        ],
    )
    def chunks(context: AssetExecutionContext) -> MaterializeResult:
        from chunking.tokenizers import get_tokenizer
        from retrieval.indexing import stage_chunks

        store = context.resources.postgres.store()
        embedder = getattr(context.resources, "embedder", None)
        model = embedder.for_config(config) if embedder is not None else None
        report = stage_chunks(store, spec, embedding_model=model)
        tokenizer = get_tokenizer("model", config.embedding_model)
        limit = _model_token_limit(config, embedder, model)
        staged = checks.staged_documents(store, spec.name)
        return MaterializeResult(
            metadata={
                **_metadata_values(report.as_metadata()),
                "rechunked_documents": _id_list(staged["chunked"]),
                "removed_documents": _id_list(staged["removed"]),
            },
            check_results=[
                _check(
                    keys["chunks"],
                    "spans_match_documents",
                    checks.check_spans(store, spec.collection, spec.name, "staged"),
                ),
                _check(
                    keys["chunks"],
                    "no_empty_chunks",
                    checks.check_no_empty_chunks(store, spec.name, "staged"),
                ),
                _check(
                    keys["chunks"],
                    "within_model_token_limit",
                    checks.check_token_limit(
                        store, spec.name, tokenizer, limit, allow_truncation=config.allow_truncation
                    ),
                ),
            ],
        )

    @asset(
        **common("embeddings"),
        deps=[keys["chunks"]],
        automation_condition=_eager(),
        kinds={"pytorch", "pgvector"},
        pool="embedding",
        check_specs=[
            AssetCheckSpec(
                "one_vector_per_chunk",
                asset=keys["embeddings"],
                description="One embedding per staged chunk, with the model's dimensions.",
            ),
        ],
    )
    def embeddings(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        from retrieval.indexing import stage_embeddings

        store = postgres.store()
        model = embedder.for_config(config)
        report = stage_embeddings(store, spec, model)
        staged = checks.staged_documents(store, spec.name)
        return MaterializeResult(
            metadata={
                **_metadata_values(report.as_metadata()),
                "embedded_documents": _id_list(staged["chunked"]),
            },
            check_results=[
                _check(
                    keys["embeddings"],
                    "one_vector_per_chunk",
                    checks.check_staged_embeddings(store, spec.name, model.dim),
                ),
            ],
        )

    @asset(
        **common("bm25"), deps=[keys["chunks"]], automation_condition=_eager(), kinds={"python", "postgres"}
    )
    def bm25(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from retrieval.indexing import stage_bm25

        report = stage_bm25(postgres.store(), spec)
        return MaterializeResult(metadata=_metadata_values(report.as_metadata()))

    @asset(
        **common("index"),
        deps=[keys["embeddings"], keys["bm25"]],
        automation_condition=_eager(),
        kinds={"postgres"},
        check_specs=[
            AssetCheckSpec(
                "published_spans_match",
                asset=keys["index"],
                description="Every published chunk's span matches its document.",
            ),
            AssetCheckSpec(
                "published_vectors",
                asset=keys["index"],
                description="Every published chunk has one vector with the model's dimensions.",
            ),
            AssetCheckSpec(
                "bm25_count_matches_chunks",
                asset=keys["index"],
                description="BM25 document count equals the chunk count.",
            ),
        ],
    )
    def index(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from retrieval.indexing import publish

        store = postgres.store()
        report = publish(store, spec)
        info = store.index_info(spec.name) or {}
        dim = int(info.get("dim") or 0)  # 0: nothing published yet, any single dimension passes
        return MaterializeResult(
            metadata=_metadata_values(report.as_metadata()),
            check_results=[
                _check(
                    keys["index"],
                    "published_spans_match",
                    checks.check_spans(store, spec.collection, spec.name, "published"),
                ),
                _check(
                    keys["index"],
                    "published_vectors",
                    checks.check_published_embeddings(store, spec.name, dim),
                ),
                _check(
                    keys["index"], "bm25_count_matches_chunks", checks.check_bm25_counts(store, spec.name)
                ),
            ],
        )

    built = [chunks, embeddings, bm25, index]
    if not with_evaluation:
        return built

    @asset(
        **{
            **common("evaluation"),
            "code_version": code_version(
                "evaluation",
                {
                    "collection": spec.collection,
                    "modes": evaluation_modes(config),
                    "k": EVALUATION_K,
                    **index_settings(config, "evaluation"),
                },
            ),
        },
        # an index with `coarse` answers ambiguous queries from its coarse index: evaluate after both
        deps=[keys["index"]]
        + (
            [AssetKey([safe_name(spec.collection), safe_name(config.coarse["config"]), "index"])]
            if config.coarse
            else []
        ),
        automation_condition=_evaluation_condition(),
        kinds={"python"},
        check_specs=[
            AssetCheckSpec(
                "no_regression",
                asset=keys["evaluation"],
                description="Warns when a metric drops vs the previous materialisation.",
            ),
        ],
    )
    def evaluation(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        store = postgres.store()
        report, dataset_name, n_questions, skipped = run_evaluation(store, collection, spec, embedder)
        if skipped:
            context.log.warning(
                f"{spec.name}: {len(skipped)} question(s) skipped (their document is gone or their answer "
                f"text was not found): {', '.join(skipped[:20])}"
            )
        metrics = {k: float(v) for k, v in report.as_metadata().items() if isinstance(v, int | float)}
        store.record_evaluation(spec.name, dataset_name, metrics)
        previous = _previous_float_metadata(context, keys["evaluation"])
        regression = (
            checks.regression(_quality(metrics), _quality(previous), REGRESSION_TOLERANCE)
            if previous
            else (True, {"metrics_compared": 0, "note": "first evaluation: nothing to compare"})
        )
        return MaterializeResult(
            metadata={
                **_headline(metrics),
                "questions": n_questions,
                "questions_skipped": len(skipped),
                "dataset": dataset_name,
                "report": MetadataValue.md(report.markdown()),
            },
            check_results=[
                _check(keys["evaluation"], "no_regression", regression, AssetCheckSeverity.WARN),
            ],
        )

    return [*built, evaluation]


def _model_token_limit(config: IndexConfig, embedder: EmbedderResource | None, model: Any) -> int:
    """The embedding model's input limit in its own tokens (read from its config, no torch needed)."""
    if model is not None:
        return int(model.max_seq_length)
    import json

    from chunking.models import resolve_model_path

    path = Path(resolve_model_path(config.embedding_model))
    for name in ("sentence_bert_config.json", "config.json"):
        file = path / name
        if file.is_file():
            data = json.loads(file.read_text())
            for key in ("max_seq_length", "max_position_embeddings"):
                if key in data:
                    return int(data[key])
    if embedder is None:
        raise ValueError(
            f"index config {config.name}: cannot read the input limit of model {config.embedding_model!r} "
            f"from {path} (no max_seq_length / max_position_embeddings)"
        )
    return int(embedder.for_config(config).max_seq_length)


def _previous_float_metadata(context: AssetExecutionContext, key: AssetKey) -> dict[str, float]:
    """Float metadata of the asset's latest earlier materialisation ({} if none)."""
    records = context.instance.fetch_materializations(key, limit=1).records
    if not records:
        return {}
    materialization = records[0].asset_materialization
    if materialization is None:
        return {}
    values = {}
    for name, value in materialization.metadata.items():
        raw = getattr(value, "value", None)
        if isinstance(raw, float):
            values[name] = raw
    return values


_DOC_KEYS = ("doc", "doc_id", "document")


def collection_questions(store: Any, collection: CollectionConfig) -> tuple[list[Any], str, list[str]]:
    """The collection's evaluation questions, the dataset's name, and the ids of questions skipped
    because they refer to a document the collection no longer has (deleted or failed to load)."""
    if collection.dataset:
        from evaluation.datasets import load_dataset

        dataset = load_dataset(collection.dataset)
        return list(dataset.questions), dataset.name, []
    if not collection.eval_set:
        return [], "", []
    from evaluation.datasets import read_records, resolve_records

    path = Path(collection.eval_set)
    if not path.is_absolute():
        path = project_root() / path
    documents = store.documents(collection.name)
    known = {d.id for d in documents}
    records, _header = read_records(path)
    kept, skipped = [], []
    for number, record in enumerate(records):
        entries = [record, *[r for r in record.get("references") or [] if isinstance(r, dict)]]
        named = {str(e[k]) for e in entries for k in _DOC_KEYS if e.get(k) is not None}
        if named - known:
            skipped.append(str(record.get("id", f"record {number + 1}")))
        else:
            kept.append(record)
    loaded = resolve_records(kept, documents, on_missing="skip", source=str(path))
    skipped += list(loaded.missing)
    return list(loaded.questions), path.stem, skipped


def evaluation_modes(config: IndexConfig) -> tuple[str, ...]:
    """dense, bm25 and hybrid; plus `hybrid+rerank` when the config names a reranker."""
    from orchestration.resources import RerankerResource

    if RerankerResource.name_for(config.rerank):
        return (*EVALUATION_MODES, "hybrid+rerank")
    return EVALUATION_MODES


def run_evaluation(
    store: Any, collection: CollectionConfig, spec: IndexSpec, embedder: EmbedderResource
) -> tuple[Any, str, int, list[str]]:
    """Evaluate one published index on its collection's questions, every retrieval mode."""
    from evaluation.runner import evaluate_index
    from retrieval.search import Searcher

    questions, dataset_name, skipped = collection_questions(store, collection)
    if not questions:
        raise ValueError(
            f"{spec.name}: no evaluable question in {collection.eval_set or collection.dataset} "
            f"({len(skipped)} skipped: they refer to documents the collection no longer has)"
        )
    searcher = Searcher(store, embedder.for_config(spec.config))
    report = evaluate_index(
        searcher,
        spec,
        questions,
        modes=evaluation_modes(spec.config),
        k=EVALUATION_K,
        dataset=dataset_name,
        store=store,
    )
    return report, dataset_name, len(questions), skipped


def build_leaderboard_asset(collection: CollectionConfig, specs: Sequence[IndexSpec]) -> AssetsDefinition:
    name = collection.name
    eval_keys = [index_key(spec, "evaluation") for spec in specs]

    @asset(
        key=leaderboard_key(name),
        group_name=safe_name(name),
        description=f"Every index config of `{name}` compared on the same questions (table + chart).",
        code_version=code_version("leaderboard", {"collection": name, "indexes": [s.name for s in specs]}),
        deps=eval_keys,
        automation_condition=_eager(),
        kinds={"python"},
        metadata={"collection": name, "indexes": ", ".join(s.name for s in specs)},
    )
    def leaderboard(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from evaluation.reports import SUMMARY_METRICS
        from evaluation.reports import leaderboard as build_leaderboard
        from retrieval.db import chunkyard_home

        store = postgres.store()
        board = build_leaderboard(collect_reports(store, specs))
        out_dir = chunkyard_home() / "reports" / name
        out_dir.mkdir(parents=True, exist_ok=True)
        png = out_dir / "leaderboard.png"
        board.plot_png(png)
        (out_dir / "leaderboard.md").write_text(board.markdown())
        (out_dir / "leaderboard.csv").write_text(board.csv())
        chart = base64.b64encode(png.read_bytes()).decode()
        return MaterializeResult(
            metadata={
                "leaderboard": MetadataValue.md(board.markdown()),
                "chart": MetadataValue.md(f"![leaderboard chart](data:image/png;base64,{chart})"),
                "chart_path": MetadataValue.path(str(png)),
                "csv_path": MetadataValue.path(str(out_dir / "leaderboard.csv")),
                "markdown_path": MetadataValue.path(str(out_dir / "leaderboard.md")),
                # The short view `chunkyard demo` prints.
                "summary": MetadataValue.md(board.markdown(SUMMARY_METRICS, cost_columns=("chunks",))),
                "indexes": len(specs),
            }
        )

    return leaderboard


_QUALITY = re.compile(
    r"^[a-z0-9_+:-]+/(hit_at|mrr_at|recall_at|precision_at|iou_at|chroma_precision_at|"
    r"chroma_iou_at|budget_recall)_?\d+$"
)


# Plotted per materialisation in the UI; the full set (CIs, budgets, latency) is in the store
# and in the `report` markdown.
HEADLINE = re.compile(
    r"^[a-z0-9_+:-]+/(hit_at_\d+|mrr_at_\d+|recall_at_\d+|precision_at_\d+|iou_at_\d+)$|^cost/chunks$"
)


def _headline(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if HEADLINE.match(k)}


def _quality(metrics: dict[str, float]) -> dict[str, float]:
    """The higher-is-better means (`dense/hit_at_5`, ...): what a regression is measured on."""
    return {k: v for k, v in metrics.items() if _QUALITY.match(k)}


@dataclass
class _StoredEstimate:
    values: dict[str, float]

    def as_dict(self) -> dict[str, float]:
        return self.values


@dataclass
class _StoredSummary:
    overall: dict[str, _StoredEstimate]


@dataclass
class StoredReport:
    """An evaluation as recorded in the store (flat `mode/metric[_ci_low|_ci_high]` floats), in the
    shape `evaluation.reports.leaderboard` reads: so the leaderboard comes from the database, not
    from objects passed between processes."""

    index: str
    config: str
    dataset: str
    k: int
    n_questions: int
    summaries: dict[str, _StoredSummary]
    cost: dict[str, float]
    latency: dict[str, dict[str, float]]

    @classmethod
    def from_flat(cls, index: str, dataset: str, flat: dict[str, float], k: int) -> "StoredReport":
        n = int(flat.get("questions", 0))
        summaries: dict[str, _StoredSummary] = {}
        cost: dict[str, float] = {}
        latency: dict[str, dict[str, float]] = {}
        for key, value in flat.items():
            if "/" not in key:
                continue
            group, name = key.split("/", 1)
            if group == "cost":
                cost[name] = value
            elif name.startswith("latency_"):
                latency.setdefault(group, {})[name.removeprefix("latency_")] = value
            elif not name.endswith(("_ci_low", "_ci_high")):
                estimate = {
                    "mean": value,
                    "ci_low": flat.get(f"{key}_ci_low", value),
                    "ci_high": flat.get(f"{key}_ci_high", value),
                    "n": n,
                }
                summaries.setdefault(group, _StoredSummary({})).overall[name] = _StoredEstimate(estimate)
        return cls(index, index.split("/", 1)[-1], dataset, k, n, summaries, cost, latency)


def collect_reports(store: Any, specs: Sequence[IndexSpec]) -> list[StoredReport]:
    """The latest stored evaluation of each index (indexes never evaluated are left out)."""
    reports = []
    for spec in specs:
        latest = store.latest_evaluation(spec.name)
        if latest is None:
            continue
        flat = {k: float(v) for k, v in (latest.get("metrics") or {}).items() if isinstance(v, int | float)}
        reports.append(StoredReport.from_flat(spec.name, latest.get("dataset", ""), flat, EVALUATION_K))
    return reports


# -- everything ------------------------------------------------------------------------------


def build_collection_assets(
    collection: CollectionConfig, configs: dict[str, IndexConfig]
) -> CollectionAssets:
    built = CollectionAssets(collection)
    docs = build_documents_asset(collection)
    built.assets.append(docs)
    built.documents_key = docs.key
    built.indexing_keys.append(docs.key)
    has_questions = bool(collection.dataset or collection.eval_set)
    specs = [IndexSpec(collection.name, configs[name]) for name in collection.indexes]
    for spec in specs:
        index_assets = build_index_assets(collection, spec, with_evaluation=has_questions)
        built.assets.extend(index_assets)
        built.indexing_keys.extend(index_key(spec, k) for k in ("chunks", "embeddings", "bm25", "index"))
        if has_questions:
            built.evaluation_keys.append(index_key(spec, "evaluation"))
    if has_questions and specs:
        board = build_leaderboard_asset(collection, specs)
        built.assets.append(board)
        built.leaderboard_key = board.key
    return built


def build_all(
    indexes_path: str | Path | None = None, collections_path: str | Path | None = None
) -> dict[str, CollectionAssets]:
    """Assets for every collection in collections.yaml with the configs of indexes.yaml."""
    configs = load_index_configs(indexes_path)
    collections = load_collection_configs(collections_path)
    from retrieval.config import load_index_specs

    load_index_specs(indexes_path, collections_path)  # validates that every named config exists
    return {name: build_collection_assets(c, configs) for name, c in collections.items()}
