"""The command line as a person uses it: one-line errors with their exit codes, and the walk-through
init, add, index, search from a folder outside the repository (every format, a bad file of each),
then serve: search through it, and SIGTERM leaves no Postgres behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from chunkyard.orchestration.cli import main

from tests.cli_helpers import CLI, cli_env, run_cli
from tests.conftest import REPO_ROOT
from tests.service_process import free_port
from tests.test_formats import _corrupt_files, make_docx, make_pdf, make_pptx


def test_outside_a_project_a_command_says_so_and_creates_nothing(tmp_path: Path) -> None:
    done = run_cli(["search", "anything"], tmp_path, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not in a chunkyard project" in lines[0] and "chunkyard init" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_init_and_add_write_the_project_and_refuse_what_is_wrong(
    tmp_path: Path, clean_env, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "proj"
    assert main(["init", str(root)]) == 0
    assert (root / "chunkyard.yaml").is_file() and (root / ".chunkyard" / ".gitignore").is_file()
    assert main(["init", str(root)]) == 2  # already a project
    (tmp_path / "notes").mkdir()
    clean_env.chdir(root)
    capsys.readouterr()
    assert main(["add", "mine", str(tmp_path / "notes"), "--index", "recursive-25"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recursive-25" in err[0] and "recursive-256" in err[0]  # the known names
    assert main(["add", "mine", str(tmp_path / "absent")]) == 2
    assert "absent: not a folder" in capsys.readouterr().err
    assert main(["add", "Bad Name", str(tmp_path / "notes")]) == 2
    assert main(["add", "mine", str(tmp_path / "notes"), "--include", "**/*.md"]) == 0
    assert main(["add", "mine", str(tmp_path / "notes")]) == 2  # exists: --replace overwrites
    assert main(["add", "mine", str(tmp_path / "notes"), "--replace", "--index", "token-256"]) == 0
    text = (root / "chunkyard.yaml").read_text()
    assert text.startswith("# A chunkyard project") and "token-256" in text
    assert main(["index", "nope"]) == 2
    assert "collection 'nope' is not in" in capsys.readouterr().err
    (root / "chunkyard.yaml").write_text("collections:\n  mine:\n    folders: [x\n")
    assert main(["index"]) == 2
    err = capsys.readouterr().err.strip()
    assert "chunkyard.yaml:" in err and "invalid YAML" in err and len(err.splitlines()) == 1
    with pytest.raises(Exception, match="invalid YAML"):  # --debug: the traceback, not the line
        main(["--debug", "index"])


def test_collections_named_2024_and_my_docs_index_and_names_that_spell_alike_are_refused(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """Collection names become asset keys through `assets.keys` alone: `2024` (a leading digit) and
    `my.docs` (a dot) select their assets, and `a-b` beside `a_b` (one Dagster spelling) is an error.
    `init` and `add` only write chunkyard.yaml: they run in this process (each CLI process costs
    seconds of imports); `index` and `search` run as the commands a person types."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pets.md").write_text("# Pets\n\nThe zyxomorphic llama eats hay every Tuesday morning.\n")
    project = tmp_path / "work"
    assert main(["init", str(project)]) == 0
    clean_env.chdir(project)
    for name in ("my.docs", "2024"):
        assert main(["add", name, str(docs), "--index", "recursive-256"]) == 0
    for name in ("my.docs", "2024"):
        indexed = run_cli(["index", name], project)
        assert indexed.returncode == 0, indexed.stdout + indexed.stderr
        # documents, chunks, embeddings, bm25, index: every asset of the collection, and only those
        assert f"Indexing {name}: 5 assets" in indexed.stdout, indexed.stdout
        assert "succeeded" in indexed.stdout and "1 added" in indexed.stdout, indexed.stdout
        found = run_cli(["search", "what does the llama eat", "--index", f"{name}/recursive-256"], project)
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines()[1].split()[1] == "pets.md", found.stdout

    for name in ("a-b", "a_b"):
        assert main(["add", name, str(docs), "--index", "recursive-256"]) == 0
    refused = run_cli(["index", "a-b"], project)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()
    assert len(line) == 1 and "'a-b' and 'a_b'" in line[0] and "a_b" in line[0], refused.stderr


def _postmasters(pgdata: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = process.info["cmdline"] or []
            if process.info["name"] == "postgres" and str(pgdata) in " ".join(cmdline):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_own_documents_walkthrough_then_serve_and_sigterm(tmp_path: Path) -> None:
    """The README's "Your own documents", outside the repository, as a person types it."""
    assert not tmp_path.resolve().is_relative_to(REPO_ROOT)
    docs = tmp_path / "my-docs"
    docs.mkdir()
    (docs / "pets.md").write_text("# Pets\n\nThe zyxomorphic llama eats hay every Tuesday morning.\n")
    (docs / "garden.txt").write_text("Garden notes: tomatoes need sun, water and patience.\n")
    (docs / "kitchen.html").write_text(
        "<html><body><h1>Kitchen</h1><p>Bread rises overnight.</p></body></html>"
    )
    make_pdf(docs / "tides.pdf", ["Tide tables for harbour pilots.", "Moon phases drive spring tides."])
    make_docx(docs / "harbour.docx")  # "The walrus handbook explains tide tables for harbour pilots."
    make_pptx(docs / "review.pptx")  # slide 2: "The beacon upgrade ships in spring."
    bad = _corrupt_files(docs)  # a broken docx, pptx, pdf, html, md and txt, with the expected reason

    project = tmp_path / "work"
    project.mkdir()
    assert run_cli(["init"], project).returncode == 0
    added = run_cli(["add", "mine", str(docs)], project)
    assert added.returncode == 0, added.stderr
    indexed = run_cli(["index"], project)
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    out = indexed.stdout
    assert "succeeded" in out and "6 added" in out and f"{len(bad)} failed" in out
    for name, reason in bad.items():
        assert any(line.strip().startswith(f"- {name}: {reason}") for line in out.splitlines()), name

    expectations = {
        "what does the llama eat": "pets.md",
        "when does the beacon upgrade ship": "review.pptx",
        "walrus handbook for harbour pilots": "harbour.docx",
        "how long does bread rise": "kitchen.html",
    }
    done = run_cli(["search", "what does the llama eat", "-k", "3"], project)
    assert done.returncode == 0, done.stderr
    assert "in-process" in done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[1].split()[1] == "pets.md", done.stdout
    missing = run_cli(["search", "x", "--index", "mine/nope"], project)
    assert (
        missing.returncode == 2 and "mine/nope" in missing.stderr and "mine/recursive-256" in missing.stderr
    )

    # serve: search goes through it and says so; SIGTERM stops it and the embedded Postgres
    pgdata = (project / ".chunkyard" / "pg").resolve()
    port = free_port()
    serve = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)],
        cwd=project,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert serve.poll() is None, serve.stdout.read().decode() if serve.stdout else ""
            time.sleep(0.1)
        record = json.loads((project / ".chunkyard" / "service.json").read_text())
        assert record["pid"] == serve.pid
        for query, expected in expectations.items():
            done = run_cli(["search", query, "-k", "3"], project)
            assert done.returncode == 0, done.stderr
            assert "via the running service" in done.stdout.splitlines()[0]
            assert done.stdout.splitlines()[1].split()[1] == expected, (query, done.stdout)
        # --no-service while one runs: says so, not "no running service"
        local = run_cli(["search", "what does the llama eat", "-k", "1", "--no-service"], project)
        assert local.stdout.splitlines()[0].endswith("in-process (--no-service)"), local.stdout
        # for people: where in the document, rounded scores, integer ranks
        first = run_cli(
            ["search", "when does the beacon upgrade ship", "-k", "1"], project
        ).stdout.splitlines()[1]
        assert re.match(r"1\. review\.pptx \(slides? [\d-]+\) \[", first), first
        assert re.search(r"ranks: bm25 \d+, dense \d+$", first), first
        assert not re.search(r"\d\.\d{4}", first), first
        pdf = run_cli(["search", "moon phases spring tides", "-k", "1"], project).stdout.splitlines()[1]
        assert re.match(r"1\. tides\.pdf \(pages? [\d-]+(, highlight on page \d+)?\) \[", pdf), pdf
        # for programs: --json is the HTTP response, and the Python client finds the service itself
        shown = json.loads(
            run_cli(["search", "what does the llama eat", "-k", "2", "--json"], project).stdout
        )
        body = {"query": "what does the llama eat", "index": "mine/recursive-256", "k": 2}
        served = httpx.post(f"http://127.0.0.1:{port}/v1/search", json=body, timeout=30).json()
        assert set(shown) == set(served) and set(shown["results"][0]) == set(served["results"][0])
        assert [r["chunk_id"] for r in shown["results"]] == [r["chunk_id"] for r in served["results"]]
        assert shown["results"][0]["rank"] == 1 and shown["index"] == served["index"] == "mine/recursive-256"
        found = subprocess.run(
            [
                sys.executable,
                "-c",
                "from chunkyard import Client; print(Client().search('llama eats hay', index='mine/recursive-256')[0].doc_id)",
            ],
            cwd=project,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert found.stdout.strip() == "pets.md", found.stderr
        assert _postmasters(pgdata)
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
    deadline = time.monotonic() + 20
    while _postmasters(pgdata) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _postmasters(pgdata), "the embedded Postgres outlived chunkyard serve"
    assert json.loads((pgdata / ".handle_pids.json").read_text()) == []
    assert not (project / ".chunkyard" / "service.json").exists()
