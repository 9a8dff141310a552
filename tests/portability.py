"""Which functions of a native binary need AVX-512 outside runtime dispatch, read from its disassembly.

A library compiled with `-march=native` on an AVX-512 machine runs there and dies with SIGILL (signal
4) on most others: AMD Zen 2/3 and Intel client CPUs. Running it here proves nothing, so this reads
the machine code instead (binutils' objdump) and lists every function outside the runtime-dispatched
ones that uses an AVX-512 encoding or register:

- an EVEX-encoded instruction (first opcode byte 0x62 in 64-bit mode, after any legacy prefix that
  may precede it): every AVX-512 instruction, whatever registers it names;
- a `zmm` register, an opmask register `k0`-`k7`, or `xmm16`-`xmm31` / `ymm16`-`ymm31`.

Runtime-dispatched functions are those whose name says AVX-512 (pgvector's `*Avx512Popcount`,
PostgreSQL's `pg_*_avx512`): both projects call them only after CPUID and XGETBV say the CPU has it.

`python -m tests.portability FILE...` prints the findings for any files (exit 1 if any).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

DISPATCHED = re.compile(r"avx512", re.IGNORECASE)
_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_REGISTER = re.compile(r"%(zmm\d+|k[0-7]\b|[xy]mm(1[6-9]|2\d|3[01])\b)")
# Prefixes that may stand before an EVEX instruction in 64-bit mode (address size, segments).
_PASS_PREFIXES = {"67", "26", "2e", "36", "3e", "64", "65"}


def objdump() -> str | None:
    return shutil.which("objdump")


def avx512_outside_dispatch(path: Path) -> Counter[str]:
    """{function: number of AVX-512 instructions} for the functions not dispatched at run time."""
    tool = objdump()
    if tool is None:
        raise RuntimeError("objdump (binutils) is needed to read the machine code")
    listing = subprocess.run(
        [tool, "-d", "--insn-width=15", "-M", "att", str(path)],
        check=True,
        capture_output=True,
        text=True,
        errors="replace",
    ).stdout
    found: Counter[str] = Counter()
    function = "?"
    for line in listing.splitlines():
        header = _FUNCTION.match(line)
        if header:
            function = header.group("name")
            continue
        fields = line.split("\t")
        if len(fields) < 3 or DISPATCHED.search(function):
            continue
        raw = fields[1].split()
        opcode = next((byte for byte in raw if byte not in _PASS_PREFIXES), "")
        if opcode == "62" or _REGISTER.search(fields[2]):
            found[function] += 1
    return found


def main(argv: list[str]) -> int:
    status = 0
    for name in argv:
        found = avx512_outside_dispatch(Path(name))
        print(f"{name}: {len(found)} function(s) use AVX-512 outside runtime dispatch")
        for function, count in found.most_common():
            print(f"  {function}: {count} instruction(s)")
        status |= bool(found)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
