"""The worked examples of docs/integrations.md (issue 36), run as their readers run them: the LangChain and
LlamaIndex RAG scripts against a running service through a serving alias, and the MCP client session
starting `chunkyard mcp` over stdio; on a real index of PDFs and decks."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.aliases import set_alias

from tests.located_index import build_located
from tests.service_process import serve_in_thread

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
KEY = "examples-key-36"
QUESTION = "How much does a berth cost per metre?"


def example(name: str) -> str:
    """The code block of docs/integrations.md whose first line names `name`."""
    for block in DOC.read_text().split("```python\n")[1:]:
        code = block.split("```", 1)[0]
        if code.startswith(f"# {name}:"):
            return code
    raise AssertionError(f"docs/integrations.md has no example {name}")


@pytest.fixture(scope="module")
def alias(store, embedder, tmp_path_factory) -> str:
    index, _ = build_located(store, embedder, tmp_path_factory.mktemp("located"))
    name = f"docs-live-{uuid.uuid4().hex[:6]}"
    set_alias(store, name, index)
    return name


@pytest.fixture(scope="module")
def url(store, embedder, alias: str):
    with serve_in_thread(create_app(Searcher(store, embedder), api_key=KEY)) as base:
        yield base


def run(code: str, folder: Path, env: dict[str, str]) -> str:
    script = folder / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script), QUESTION],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def client_env(alias: str, url: str) -> dict[str, str]:
    return {**os.environ, "CHUNKYARD_URL": url, "CHUNKYARD_API_KEY": KEY, "CHUNKYARD_INDEX": alias}


@pytest.mark.parametrize("name", ["rag_langchain.py", "rag_llamaindex.py"])
def test_rag_scripts_cite_the_page_of_the_answer(name: str, alias: str, url: str, tmp_path: Path) -> None:
    pytest.importorskip(
        "langchain_core" if "langchain" in name else "llama_index.core", reason="extra not installed"
    )
    code = example(name)
    assert len(code.splitlines()) <= 45
    out = run(code, tmp_path, client_env(alias, url))
    first = out.splitlines()[0]
    assert "harbour-guide.pdf" in first and "2,60 $ per metre" in first, out
    assert ("p.2" if name == "rag_langchain.py" else "page 2") in first, out


def test_mcp_client_session(alias: str, pg_url: str, tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    (tmp_path / "chunkyard.yaml").write_text("benchmarks: false\n")
    env = {
        **os.environ,
        "DATABASE_URL": pg_url,
        "CHUNKYARD_INDEX": alias,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("CHUNKYARD_API_KEY", None)
    out = run(example("mcp_session.py"), tmp_path, env)
    lines = out.splitlines()
    assert any(line.startswith("index located") for line in lines), out
    assert any(line.startswith("harbour-guide.pdf [") and ", page 2 |" in line for line in lines), out
    assert "2,60 $ per metre" in out
