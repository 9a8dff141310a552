"""The README's "Your own documents" as typed, on a folder that is not English (issue 39): `add` picks the
multilingual model and says why, `index` counts its progress when piped, `search` with no --index reads
the index `add` chose, and several Python processes search right after the CLI run, sharing one
embedded server, each ending cleanly (no traceback, no warning)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.test_formats import make_pdf

CLI = [sys.executable, "-m", "chunkyard.orchestration.cli"]
MULTILINGUAL = REPO_ROOT / "tests" / "data" / "multilingual"
STATE_VARIABLES = (
    "CHUNKYARD_PROJECT",
    "CHUNKYARD_PROJECT_DIR",
    "CHUNKYARD_HOME",
    "CHUNKYARD_CONFIGS",
    "CHUNKYARD_BENCHMARKS",
    "DATABASE_URL",
    "DAGSTER_HOME",
    "XDG_RUNTIME_DIR",  # unset, as in a container or cron: nothing may warn about it
)
SCRIPT = "import chunkyard; print(chunkyard.search({query!r}, k=1)[0].doc_id)"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}


def _run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


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
