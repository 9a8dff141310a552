"""A user's first day (issue 39): the index read when none is named, `add` saying why it chose a model,
`check` refusing what it can know before a run (and warning on a model that does not suit the folder),
inherited defaults dropped where a backend does not read them, and embedding that keeps every batch."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from chunkyard.orchestration.cli import main
from chunkyard.retrieval.indexing import embeddings
from chunkyard.retrieval.settings.config import load_index_configs
from chunkyard.retrieval.settings.default_index import NoDefaultIndex, default_index
from chunkyard.retrieval.settings.names import IndexName

from tests.cli_helpers import run_cli
from tests.conftest import REPO_ROOT

MULTILINGUAL = REPO_ROOT / "tests" / "data" / "multilingual"


def _project(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "chunkyard.yaml").write_text(text, encoding="utf-8")
    return root


def _folder(root: Path, *languages: str, files: int = 2) -> Path:
    """A folder of the multilingual test set's first `files` articles in each of `languages`."""
    for language in languages:
        for path in sorted((MULTILINGUAL / language).glob("*.md"))[:files]:
            (root / language).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, root / language / path.name)
    return root


def test_the_default_index_is_the_collection_s_only_one_or_the_one_the_project_names(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "proj", "collections: {}\n")
    clean_env.chdir(root)
    with pytest.raises(NoDefaultIndex, match="no collections yet: `chunkyard add NAME FOLDER`"):
        default_index()
    (root / "docs").mkdir()
    _project(root, "collections:\n  mine:\n    folders: [docs]\n    indexes: [recursive-256-multilingual]\n")
    assert default_index() == IndexName("mine", "recursive-256-multilingual")  # what `add` chose
    _project(
        root,
        "collections:\n"
        "  mine:\n    folders: [docs]\n    indexes: [token-256, recursive-256-multilingual]\n"
        "    default_index: recursive-256-multilingual\n"
        "  more:\n    folders: [docs]\n    indexes: [token-256, recursive-256]\n",
    )
    with pytest.raises(NoDefaultIndex, match=r"2 collections \(mine, more\) and no `default_index:`"):
        default_index()
    assert default_index("mine") == IndexName("mine", "recursive-256-multilingual")
    assert default_index("more") == IndexName("more", "recursive-256")  # the default config when listed
    with pytest.raises(NoDefaultIndex, match="collection 'nope' is not in"):
        default_index("nope")
    text = (root / "chunkyard.yaml").read_text()
    _project(root, "default_index: more\n" + text)
    assert default_index() == IndexName("more", "recursive-256")
    _project(root, "default_index: mine/token-256\n" + text)
    assert default_index() == IndexName("mine", "token-256")
    _project(root, "default_index: gone/token-256\n" + text)
    with pytest.raises(NoDefaultIndex, match=r"chunkyard.yaml:1: default_index: no collection 'gone'"):
        default_index()
    clean_env.chdir(tmp_path)  # outside a project (DATABASE_URL alone): the demo index, as before
    assert default_index() == IndexName("demo", "recursive-256")


def test_search_in_a_fresh_project_says_to_add_a_collection(tmp_path: Path) -> None:
    assert run_cli(["init"], tmp_path).returncode == 0
    done = run_cli(["search", "anything"], tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no collections yet: `chunkyard add NAME FOLDER`" in lines[0], lines
    assert "demo/recursive-256" not in done.stderr


def test_add_says_why_it_chose_the_multilingual_model_and_check_warns_on_an_english_one(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "proj"
    assert main(["init", str(root)]) == 0
    folder = _folder(tmp_path / "mine", "es", "uk")
    clean_env.chdir(root)
    capsys.readouterr()
    assert main(["add", "mine", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "indexes recursive-256-multilingual" in out
    chose = next(line for line in out.splitlines() if line.startswith("Chose "))
    assert "% es" in chose and "% uk" in chose and "less than 95% English" in chose, chose
    assert "multilingual-e5-small" in chose, chose
    assert main(["check"]) == 0
    assert "warning:" not in capsys.readouterr().out  # the model suits the folder
    # an index config of the user's own without `embedding_model` gets the English default: a warning
    text = (root / "chunkyard.yaml").read_text()
    text = text.replace("[recursive-256-multilingual]", "[mine-200]")
    text += "indexes:\n  mine-200:\n    chunker: {strategy: recursive, size: 200}\n"
    (root / "chunkyard.yaml").write_text(text)
    assert main(["check"]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "mine/mine-200" in warnings[0], warnings
    assert "English-only" in warnings[0] and "embedding_model: multilingual-e5-small" in warnings[0]


def test_check_refuses_a_chunk_size_beyond_the_model_s_input_with_file_and_line(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    root = _project(
        tmp_path,
        "collections:\n  mine:\n    folders: [docs]\n    indexes: [huge]\n"
        "indexes:\n  huge:\n    chunker:\n      strategy: recursive\n      size: 100000\n",
    )
    clean_env.chdir(root)
    capsys.readouterr()
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert f"{root / 'chunkyard.yaml'}:9: indexes.huge.chunker.size: 100000 model tokens" in err, err
    assert "all-MiniLM-L6-v2 reads (256 of its tokens)" in err and "allow_truncation" in err, err
    assert "Configuration OK" not in err
    # the same size with `allow_truncation: true` is what the user asked for
    (root / "chunkyard.yaml").write_text(
        (root / "chunkyard.yaml").read_text() + "    allow_truncation: true\n"
    )
    assert main(["check"]) == 0


def test_an_embedding_server_config_drops_the_defaults_int8_instead_of_refusing_it(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docs").mkdir()
    entry = (
        "  server:\n    chunker: {strategy: recursive, size: 256}\n"
        "    embedder: {backend: openai, url: 'http://127.0.0.1:18601/v1', model: e5, dimensions: 384%s}\n"
    )
    root = _project(tmp_path, "collections:\n  mine:\n    folders: [docs]\n    indexes: [server]\nindexes:\n")
    text = (root / "chunkyard.yaml").read_text()
    (root / "chunkyard.yaml").write_text(text + entry % "")
    clean_env.chdir(root)
    config = load_index_configs()["server"]
    assert "quantize" not in config.embedder and "device" not in config.embedder
    assert config.embedder["batch_size"] == 32  # what the server backend reads is still inherited
    assert load_index_configs()["recursive-256"].embedder["quantize"] == "int8"  # onnx keeps it
    (root / "chunkyard.yaml").write_text(text + entry % ", quantize: int8")  # written: still refused
    with pytest.raises(Exception, match="embedder.quantize: the server runs its own model"):
        load_index_configs()


class _StopsAfter:
    """The real embedder, interrupted (as by Ctrl-C) in its `calls`-th model call."""

    def __init__(self, embedder, calls: int) -> None:
        self._embedder, self._left = embedder, calls
        self.model_id = f"{embedder.model_id}#first-day-test"
        self.sizes: list[int] = []

    def embed(self, texts: list[str], role: str = "document") -> np.ndarray:
        self._left -= 1
        if self._left == 0:
            raise KeyboardInterrupt
        self.sizes.append(len(texts))
        return self._embedder.embed(texts, role)


def test_ctrl_c_during_embedding_loses_at_most_the_batch_being_embedded(store, embedder) -> None:
    """Every finished model call is in the embedding cache, and counted, before the next one starts."""
    texts = {f"h{i}": f"Chunk {i}: " + " ".join(f"word{i}x{j}" for j in range(60)) for i in range(60)}
    tokens = dict(zip(texts, embedder.tokenizer.count_batch(list(texts.values())), strict=True))
    batches = embeddings.token_batches(list(texts), tokens)
    assert len(batches) >= 4 and all(len(b) <= embeddings.EMBED_BATCH for b in batches)
    assert all(len(b) * max(tokens[h] for h in b) <= embeddings.EMBED_BATCH_TOKENS for b in batches)
    stopping = _StopsAfter(embedder, calls=3)
    counted: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        embeddings.embed_and_cache(
            store, stopping, list(texts), texts, tokens, lambda done, total: counted.append(done)
        )
    cached = store.embedding_cache.lookup(stopping.model_id, texts)
    assert counted == [len(batches[0]), len(batches[0]) + len(batches[1])]  # one count per batch
    assert set(cached) == set(batches[0]) | set(batches[1])  # both finished batches kept
    assert len(texts) - len(cached) == sum(len(b) for b in batches[2:])  # the rest: never started or lost


def test_the_leaderboard_calls_a_tie_a_tie_and_the_suggestion_says_so(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    from chunkyard.evaluation.estimates import Estimate
    from chunkyard.evaluation.reports import Leaderboard, LeaderboardRow
    from chunkyard.orchestration.cli_search import suggestion

    def row(variant: str, mean: float, low: float, high: float) -> LeaderboardRow:
        estimate = Estimate(mean, low, high, 12)
        return LeaderboardRow(
            "recursive-256", "mine/recursive-256", variant, "mine", 5, 12, {"recall_at_5": estimate}
        )

    def board(*rows: LeaderboardRow) -> Leaderboard:
        return Leaderboard(list(rows), 5, sort_by="recall_at_5")

    assert board(row("hybrid", 0.9, 0.7, 1.0), row("dense", 0.9, 0.6, 1.0)).standing() == "tied"
    assert (
        board(row("hybrid", 0.9, 0.7, 1.0), row("dense", 0.8, 0.6, 0.95)).standing() == "within the interval"
    )
    assert board(row("hybrid", 0.9, 0.85, 1.0), row("dense", 0.5, 0.4, 0.6)).standing() == "best"
    assert board(row("hybrid", 0.9, 0.85, 1.0)).standing() == "best"
    (tmp_path / "docs").mkdir()
    _project(tmp_path, "collections:\n  mine:\n    folders: [docs]\n    indexes: [recursive-256]\n")
    clean_env.chdir(tmp_path)
    best = ("mine/recursive-256", "hybrid")
    tied = suggestion("mine", best, ("tied", "mine/recursive-256 dense"))
    assert "--index" not in tied  # the default index needs no name
    assert "tied first on the leaderboard with mine/recursive-256 dense" in tied and "best" not in tied
    assert "within its confidence interval" in suggestion("mine", best, ("within the interval", "x dense"))
    assert "(the leaderboard's best)" in suggestion("mine", best, ("best", "x dense"))


def test_search_timings_add_up_and_counts_are_plain_words() -> None:
    from chunkyard.orchestration.cli_search import counted, timings

    assert timings(3.02, 0.37) == "3.02 s (2.65 s starting, 0.37 s searching)"
    assert timings(0.5, 0.7) == "0.50 s (0.00 s starting, 0.50 s searching)"  # never more than the whole
    assert [counted(n, "result") for n in (0, 1, 2)] == ["0 results", "1 result", "2 results"]


def test_add_takes_an_eval_set_and_eval_help_shows_its_format(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkyard.retrieval.settings.config import load_collections

    root = tmp_path / "proj"
    assert main(["init", str(root)]) == 0
    folder = _folder(root / "docs", "es", files=1)
    questions = root / "evals" / "mine.jsonl"
    questions.parent.mkdir()
    questions.write_text((MULTILINGUAL / "es_questions.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    clean_env.chdir(root)
    assert main(["add", "mine", str(folder), "--eval-set", "evals/nope.jsonl"]) == 2
    assert "--eval-set evals/nope.jsonl: not a file" in capsys.readouterr().err
    assert main(["add", "mine", str(folder), "--eval-set", "evals/mine.jsonl"]) == 0
    assert "Evaluated on evals/mine.jsonl" in capsys.readouterr().out
    assert load_collections()["mine"].eval_set == "evals/mine.jsonl"  # relative: the project can move
    assert main(["check"]) == 0 and "evaluated on evals/mine.jsonl" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    shown = capsys.readouterr().out
    assert '"references": [{"doc": "harbour.md", "text": "every Monday morning"}]' in shown
    assert "`answers` are alternatives" in shown and "start`/`end`" in shown


def test_configs_lists_model_languages_size_and_cost_and_init_s_pointers_work_outside_the_repository(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "proj"
    assert main(["init", str(root)]) == 0
    header = (root / "chunkyard.yaml").read_text()
    assert "docs/configuration.md" not in header  # not there outside the repository
    for command in ("chunkyard check", "chunkyard configs", "chunkyard eval --help"):
        assert command in header
    (root / "docs").mkdir()
    clean_env.chdir(root)
    assert main(["add", "mine", "docs", "--index", "recursive-256-multilingual"]) == 0
    capsys.readouterr()
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    used = next(line for line in lines if line.startswith("* recursive-256-multilingual "))
    assert "multilingual-e5-small (about 100 languages)" in used and "recursive 256 model tokens" in used
    assert "onnx int8, ~17.1 chunks/s" in used
    english = next(line for line in lines if line.startswith("  recursive-256 "))
    assert "all-MiniLM-L6-v2 (English)" in english and "~33.5 chunks/s" in english
    assert not any(line.startswith(("  chroma-", "  eval-")) for line in lines)  # benchmark ones: --all
    assert main(["configs", "--all"]) == 0
    assert any(line.startswith("  chroma-recursive-250-0 ") for line in capsys.readouterr().out.splitlines())


def test_eval_prints_the_short_view_that_fits_a_terminal_unless_full() -> None:
    from chunkyard.evaluation.estimates import Estimate
    from chunkyard.evaluation.reports import LEADERBOARD_METRICS, Leaderboard, LeaderboardRow
    from chunkyard.pipeline.benchmark.cli import build_parser
    from chunkyard.pipeline.benchmark.results import BenchmarkResult

    metrics = {m.format(k=5): Estimate(0.5, 0.4, 0.6, 12) for m in LEADERBOARD_METRICS}
    cost = {"chunks": 12.0, "mean_chunk_tokens": 80.0, "tokens_embedded": 960.0, "build_seconds": 3.0}
    row = LeaderboardRow("recursive-256", "mine/recursive-256", "bm25", "mine", 5, 12, metrics, cost)
    result = BenchmarkResult("mine", "full", "mine", 5, [], Leaderboard([row], 5, sort_by="recall_at_5"))

    def header(text: str) -> list[str]:
        line = next(line for line in text.splitlines() if line.startswith("| config"))
        return [cell.strip() for cell in line.strip("|").split("|")]

    short, full = header(result.markdown(compact=True)), header(result.markdown())
    assert short == ["config", "variant", "hit_at_5", "mrr_at_5", "recall_at_5", "iou_at_5"] + [
        "budget_recall_1024",
        "chunks",
        "p95 ms",
    ]
    assert len(full) > 2 * len(short) - 4  # the files keep every column
    assert build_parser().parse_args([]).full is False and build_parser().parse_args(["--full"]).full


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_s_install_says_each_step_and_lets_pip_show_its_progress() -> None:
    """`make demo` on a fresh machine installs first: five numbered steps, and pip's own progress
    (Collecting, Downloading with its bar) instead of minutes of `--quiet` silence."""
    plan = subprocess.run(
        ["make", "-n", "-B", "install"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    steps = [line for line in plan.splitlines() if line.startswith('echo "[install ')]
    assert [step.split("]")[0] for step in steps] == [f'echo "[install {i}/5' for i in range(1, 6)]
    installs = [line for line in plan.splitlines() if "/pip install" in line]
    assert len(installs) == 3 and all(
        "--quiet" not in line and "--progress-bar on" in line for line in installs
    )


def test_a_request_naming_no_index_reads_the_project_s_default_in_the_service_and_the_client(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from chunkyard.retrieval.api.models import SearchBody, search_request
    from chunkyard.retrieval.integrations.client import Client

    (tmp_path / "docs").mkdir()
    _project(
        tmp_path, "collections:\n  mine:\n    folders: [docs]\n    indexes: [recursive-256-multilingual]\n"
    )
    clean_env.chdir(tmp_path)
    request = search_request(SearchBody(query="¿Dónde está el huerto?"))
    assert str(request.ref) == "mine/recursive-256-multilingual"
    assert str(search_request(SearchBody(query="x", index="mine/token-256")).ref) == "mine/token-256"
    sent: list[dict] = []

    class Recorder(BaseHTTPRequestHandler):  # a real HTTP server: what the client puts on the wire
        def do_POST(self) -> None:  # noqa: N802
            sent.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps({"index": "", "mode": "hybrid_auto", "k": 5, "results": [], "took_ms": 1})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with Client(url) as client:
            client.search("x")
            client.search("x", index="mine/token-256", k=3)
        retrievers = []  # the framework retrievers name no index either, unless told (issue 36's extras)
        if importlib.util.find_spec("langchain_core") is not None:
            from chunkyard.retrieval.integrations.langchain import ChunkyardRetriever as LangChainRetriever

            retrievers.append(lambda: LangChainRetriever(url=url).invoke("x"))
        if importlib.util.find_spec("llama_index") is not None:
            from chunkyard.retrieval.integrations.llamaindex import ChunkyardRetriever as LlamaRetriever

            retrievers.append(lambda: LlamaRetriever(url=url).retrieve("x"))
        for retrieve in retrievers:
            retrieve()
    finally:
        server.shutdown()
    assert "index" not in sent[0]  # the service decides: its project's default index
    assert sent[1]["index"] == "mine/token-256" and sent[1]["k"] == 3
    assert len(sent) == 2 + len(retrievers) and all("index" not in body for body in sent[2:])


def test_a_batch_is_one_model_call_with_the_model_s_prompt_counted() -> None:
    """e5's `passage: ` prompt is part of each text the encoder pads: a batch stays within one call."""
    tokens = {h: 500 for h in "abcdefgh"}
    assert [len(b) for b in embeddings.token_batches(list(tokens), tokens)] == [4, 4]  # 4 x 500 <= 2048
    assert [len(b) for b in embeddings.token_batches(list(tokens), tokens, 100)] == [3, 3, 2]  # 3 x 600


def test_eval_with_no_dataset_or_collection_evaluates_the_default_index_s_collection(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    from chunkyard.pipeline.benchmark.cli import default_evaluated_collection

    clean_env.chdir(tmp_path)
    assert default_evaluated_collection() is None  # outside a project: chroma_general, as before
    (tmp_path / "docs").mkdir()
    (tmp_path / "q.jsonl").write_text('{"question": "x", "answers": ["y"]}\n')
    _project(tmp_path, "collections:\n  mine:\n    folders: [docs]\n    indexes: [recursive-256]\n")
    assert default_evaluated_collection() is None  # no eval_set: nothing of its own to evaluate on
    _project(
        tmp_path,
        "collections:\n  mine:\n    folders: [docs]\n    eval_set: q.jsonl\n    indexes: [recursive-256]\n",
    )
    assert default_evaluated_collection() == "mine"
    clean_env.chdir(REPO_ROOT)
    assert default_evaluated_collection() == "demo"  # `make eval` names --dataset chroma_general itself
