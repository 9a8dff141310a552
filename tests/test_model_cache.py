"""The per-machine model cache: one quiet export per machine and model, reused by every project."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from chunkyard.chunking.model_cache import READY, build_once, model_cache_dir

REPO_ROOT = Path(__file__).resolve().parent.parent
# What an export used to print into the user's terminal (issue 23).
EXPORT_NOISE = ("model.onnx", "TracerWarning", "torch_dtype", "save_pretrained", "Warning")

LOAD_INT8 = """
import json, sys, time
started = time.perf_counter()
from chunkyard.retrieval.embedders.embedder import load_embedder
embedder = load_embedder(backend="onnx", quantize="int8")
vector = embedder.embed(["a second project"])[0]
print(json.dumps({"seconds": time.perf_counter() - started, "torch": "torch" in sys.modules,
                  "export_dir": str(embedder.export_dir), "vector": vector.tolist()}))
"""


def run_project(project: Path, model_dir: Path) -> tuple[dict, str]:
    """A fresh process of a project (its own CHUNKYARD_HOME) loading the default ONNX int8 model."""
    env = {**os.environ, "CHUNKYARD_HOME": str(project), "CHUNKYARD_MODEL_DIR": str(model_dir)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", LOAD_INT8], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def first_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """One real export into an empty model cache (the only one this module makes)."""
    model_dir = tmp_path_factory.mktemp("model-cache")
    result, stderr = run_project(tmp_path_factory.mktemp("project-a"), model_dir)
    return model_dir, result, stderr


def test_the_first_export_is_quiet_and_lands_in_the_shared_cache(first_export) -> None:
    model_dir, result, stderr = first_export
    export = Path(result["export_dir"])
    # the cache was empty, so the export is this run's; it ran in child processes (retrieval.embedders.onnx_export),
    # so torch never entered the process that embeds
    assert export.parent == model_dir / "onnx" and (export / READY).is_file()
    assert not result["torch"]
    assert not [line for line in stderr.splitlines() if any(noise in line for noise in EXPORT_NOISE)], stderr


def test_a_second_project_reuses_the_export(first_export, tmp_path: Path) -> None:
    """Another project on the same machine loads the export: no torch, no new files, same vectors."""
    model_dir, first, _ = first_export
    export = Path(first["export_dir"])
    ready_before = (export / READY).stat().st_mtime_ns
    project_b = tmp_path / "project-b"
    second, stderr = run_project(project_b, model_dir)
    assert second["export_dir"] == first["export_dir"] and not second["torch"]
    assert (export / READY).stat().st_mtime_ns == ready_before
    assert not (project_b / "models").exists() and stderr.strip() == ""
    np.testing.assert_allclose(second["vector"], first["vector"], atol=1e-6)


def test_the_cache_defaults_to_the_user_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from platformdirs import user_cache_dir

    monkeypatch.delenv("CHUNKYARD_MODEL_DIR", raising=False)
    assert model_cache_dir() == Path(user_cache_dir("chunkyard")) / "models"
    monkeypatch.setenv("CHUNKYARD_MODEL_DIR", str(tmp_path / "elsewhere"))
    assert model_cache_dir() == (tmp_path / "elsewhere").resolve()


def _write_model(staging: Path, text: str = "built") -> None:
    (staging / "model.txt").write_text(text, encoding="utf-8")


def _read_model(folder: Path) -> str:
    text = (folder / "model.txt").read_text(encoding="utf-8")
    if not text.startswith("built"):
        raise ValueError(f"{folder}: not a model")
    return text


def test_an_unfinished_build_is_redone_and_a_broken_one_repaired(tmp_path: Path) -> None:
    target = tmp_path / "m"
    target.mkdir()
    _write_model(target)  # complete files but no ready mark: a build that died before finishing
    calls: list[Path] = []

    def build(staging: Path) -> None:
        calls.append(staging)
        _write_model(staging, f"built {len(calls)}")

    assert build_once(target, build, _read_model, "a test model") == "built 1"
    assert (
        (target / READY).is_file()
        and not list(tmp_path.glob("m.tmp-*"))
        and not list(tmp_path.glob("m.old-*"))
    )
    assert build_once(target, build, _read_model, "a test model") == "built 1" and len(calls) == 1
    (target / "model.txt").write_text("garbage", encoding="utf-8")
    with pytest.warns(UserWarning, match="a test model in the model cache .* is unusable"):
        assert build_once(target, build, _read_model, "a test model") == "built 2"


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    def build(staging: Path) -> None:
        _write_model(staging, "half")  # _read_model rejects it

    with pytest.raises(ValueError, match="not a model"):
        build_once(tmp_path / "m", build, _read_model, "a test model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.lock"]


def _build_slowly(target: str, log: str) -> None:
    def build(staging: Path) -> None:
        with open(log, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        _write_model(staging)

    build_once(Path(target), build, _read_model, "a test model")


def test_concurrent_processes_build_once(tmp_path: Path) -> None:
    """Four processes asking for the same missing model at once: one builds, three wait and load it."""
    log = tmp_path / "builds.log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_build_slowly, args=(str(tmp_path / "m"), str(log))) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert len(log.read_text().split()) == 1
