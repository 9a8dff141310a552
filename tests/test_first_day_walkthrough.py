"""The README's "Your own documents" as typed, on a folder that is not English (issue 39): `add` picks the
multilingual model and says why, `index` counts its progress when piped, `search` with no --index reads
the index `add` chose, and several Python processes search right after the CLI run, sharing one
embedded server, each ending cleanly (no traceback, no warning)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import CLI, cli_env, run_cli
from tests.conftest import REPO_ROOT
from tests.test_formats import make_pdf

MULTILINGUAL = REPO_ROOT / "tests" / "data" / "multilingual"
NO_XDG = ("XDG_RUNTIME_DIR",)  # unset, as in a container or cron: nothing may warn about it
SCRIPT = "import chunkyard; print(chunkyard.search({query!r}, k=1)[0].doc_id)"


def _env() -> dict[str, str]:
    return cli_env(*NO_XDG)


def _run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_cli(argv, cwd, timeout, also_unset=NO_XDG)


@pytest.mark.slow
def test_the_readme_walkthrough_on_a_spanish_and_ukrainian_folder(tmp_path: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(REPO_ROOT)
    docs = tmp_path / "my-docs"
    for language in ("es", "uk"):
        shutil.copytree(MULTILINGUAL / language, docs / language)
    make_pdf(docs / "horario.pdf", ["El tren sale a las ocho.", "El mercado abre los sábados."])
    project = tmp_path / "project"
    project.mkdir()

    assert _run(["init"], project).returncode == 0
    added = _run(["add", "mine", "../my-docs"], project)
    assert added.returncode == 0, added.stderr
    assert "indexes recursive-256-multilingual" in added.stdout, added.stdout
    assert "Chose recursive-256-multilingual: the folder's text is" in added.stdout, added.stdout

    indexed = _run(["index"], project)
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    assert "succeeded" in indexed.stdout and "13 added" in indexed.stdout, indexed.stdout
    # piped, the embedding step still says how far it is (a line per batch, at most every 2 s)
    counted = [line for line in indexed.stdout.splitlines() if "chunks embedded" in line]
    assert counted and counted[-1].strip().endswith("left"), indexed.stdout
    assert 'Search it: chunkyard search "your question"\n' in indexed.stdout + "\n", indexed.stdout

    done = _run(["search", "¿Cuántas parcelas tiene el huerto?", "-k", "2"], project)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()
    assert first[0].startswith("mine/recursive-256-multilingual: "), done.stdout
    assert first[1].split()[1].endswith("huerto.md"), done.stdout
    # the timings add up to the command's own, and a slow in-process search points to `serve`
    parts = re.search(
        r" in (\d+\.\d\d) s \((\d+\.\d\d) s starting, (\d+\.\d\d) s searching\), in-process", first[0]
    )
    assert parts, first[0]
    assert abs(float(parts[1]) - float(parts[2]) - float(parts[3])) <= 0.011, first[0]
    if float(parts[3]) > 2.005:  # printed to two places: 2.00 may be a search of 1.996 s, no hint
        assert "`chunkyard serve` keeps them loaded" in done.stderr, done.stderr

    # a document's chunks: spans and pages, and the name a user nearly typed
    shown = _run(["chunks", "horario.pdf"], project)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("mine/recursive-256-multilingual: horario.pdf, 1 chunk ("), shown.stdout
    assert re.search(r"^1\. \[0:\d+\] \d+ characters, pages 1-2$", shown.stdout, re.M), shown.stdout
    near = _run(["chunks", "es/huerta.md"], project)
    assert near.returncode == 2 and "did you mean es/huerto.md" in near.stderr, near.stderr

    # several processes right after the CLI run, on one embedded server: answers, and a clean exit
    questions = {
        "¿Dónde está el huerto comunitario?": "huerto.md",
        "Скільки грядок має город?": "huerto.md",
        "¿Cuántas parcelas tiene el huerto?": "huerto.md",
    }
    running = [
        (
            expected,
            subprocess.Popen(
                [sys.executable, "-c", SCRIPT.format(query=query)],
                cwd=project,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for query, expected in questions.items()
    ]
    for expected, process in running:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        assert out.strip().endswith(expected), out
        assert err == "", err  # no bm25-reload traceback, no AdminShutdown, no XDG_RUNTIME_DIR warning

    # `lag` follows chunkyard.yaml: an index whose config left the file is no longer listed, only counted
    assert _run(["lag"], project).stdout.startswith("mine/recursive-256-multilingual: 0 document")
    settings = project / "chunkyard.yaml"
    settings.write_text(settings.read_text().replace("[recursive-256-multilingual]", "[token-256]"))
    lag = _run(["lag"], project)
    assert lag.returncode == 0, lag.stderr
    assert lag.stdout.splitlines()[-1] == (
        "(1 built index no longer in chunkyard.yaml not shown: mine/recursive-256-multilingual)"
    ), lag.stdout


@pytest.mark.slow
def test_ui_says_its_url_when_it_answers_and_stops_quietly(tmp_path: Path) -> None:
    """`chunkyard ui`: its own lines only (dagster dev's go to .chunkyard/ui.log), the URL once the
    webserver answers, and on Ctrl-C one line and exit 0: no SupersessionWarning, no `Aborted!`."""
    import signal
    import socket
    import time

    import httpx

    assert _run(["init"], tmp_path).returncode == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = subprocess.Popen(
        [*CLI, "ui", "--port", str(port)],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        lines = []
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            line = ui.stdout.readline()
            assert line, f"chunkyard ui ended: {lines} {ui.stderr.read() if ui.stderr else ''}"
            lines.append(line.rstrip("\n"))
            if line.startswith("Dagster UI ready on"):
                break
        assert lines[-1] == f"Dagster UI ready on http://127.0.0.1:{port} (Ctrl-C stops it)", lines
        assert httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=10).status_code == 200
        assert lines[0].startswith("Starting the Dagster UI") and lines[1].startswith("Automation off"), lines
        ui.send_signal(signal.SIGINT)
        out, err = ui.communicate(timeout=120)
    finally:
        if ui.poll() is None:
            ui.kill()
    assert ui.returncode == 0, err
    assert out.strip().splitlines() == ["Dagster UI stopped"], out
    assert "Aborted" not in err and "Warning" not in err and err.strip() == "", err
    assert (tmp_path / ".chunkyard" / "ui.log").stat().st_size > 0  # dagster dev's own lines
