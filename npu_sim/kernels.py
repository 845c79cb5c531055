"""The OpenBLAS kernels the simulator's numerics are pinned to. OpenBLAS picks its kernels by the CPU it finds,
and its AVX-512 kernels sum in another order than its AVX2 ones: the same package then gives logits that differ
in the fourth digit from one x86-64 host to another, and with them the figures the tests and docs/acceptance.md
pin. Asking every x86-64 host with AVX2 for the AVX2 kernels makes them the same bits everywhere.

OpenBLAS reads the setting once, when numpy loads it, so it must be in a process's environment when the process
starts: `scripts/dev.py` sets it for the suite (which refuses to start without it), and the sandbox passes it on
to every runner. No numpy here: this module is read before numpy loads."""

import platform
from pathlib import Path

VARIABLE = "OPENBLAS_CORETYPE"
AVX2_KERNELS = "Haswell"


def pinned_kernels() -> dict[str, str]:
    """The environment that pins OpenBLAS's kernels on this host; empty where there is nothing to pin (no x86-64
    with AVX2)."""
    cpu_info = Path("/proc/cpuinfo")
    if platform.machine() == "x86_64" and cpu_info.is_file() and "avx2" in cpu_info.read_text().split():
        return {VARIABLE: AVX2_KERNELS}
    return {}
