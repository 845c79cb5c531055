"""The SDK check (acceptance/inspection/sdk.py) on a large library: the system's libstdc++ and its C++ headers.

    .venv/bin/python bench/sdk_check.py [--library /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30]
        [--headers /usr/include/c++/12] [--calls 200] [--repeats 3]

Two timings, each the median of `--repeats` runs: the symbols and headers read with one entry point to look
up, and the same with `--calls` entry points. The entry points are `Class::member` names taken from the
library's own demangled symbols (every n-th of them, sorted, so the same list on every run), read here with
`nm -D --defined-only | c++filt` (the seed's command), not with the code being measured. Prints the
wall and CPU timings (CPU: this process and its children, so a busy machine shows) and how many of the
entry points the check found declared and defined.
"""

import argparse
import resource
import statistics
import subprocess
import time
from pathlib import Path

from acceptance.inspection.sdk import check_sdk


def member_calls(library: Path, count: int) -> list[str]:
    """`Class::member` of the library's C++ functions, every n-th of the sorted distinct names."""
    listing = subprocess.run(
        f"nm -D --defined-only {library} | c++filt", shell=True, capture_output=True, text=True, check=True
    ).stdout
    names = set()
    for line in listing.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[1] not in ("T", "W", "i"):
            continue
        signature = parts[2]
        if "(" not in signature or "<" in signature.split("(", 1)[0]:
            continue  # templates and operators aside: plain members only
        scopes = signature.split("(", 1)[0].split(" ")[-1].split("::")
        if len(scopes) >= 3 and all(scope.isidentifier() for scope in scopes[-2:]):
            names.add("::".join(scopes[-2:]))
    ordered = sorted(names)
    step = max(1, len(ordered) // count)
    return ordered[::step][:count]


def timed(headers: Path, library: Path, calls: list[str], repeats: int) -> tuple[float, float, int, int]:
    """Median wall and CPU seconds (this process and c++filt) of the check, and how many calls it found
    declared and defined."""
    wall, cpu = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), _cpu_seconds()
        report = check_sdk(headers, library, calls)
        wall.append(time.perf_counter() - started)
        cpu.append(_cpu_seconds() - started_cpu)
    declared = sum(1 for found in report.entry_points.values() if found["declared_in"])
    defined = sum(1 for found in report.entry_points.values() if found["symbol"])
    return statistics.median(wall), statistics.median(cpu), declared, defined


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, default=Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"))
    parser.add_argument("--headers", type=Path, default=Path("/usr/include/c++/12"))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    calls = member_calls(args.library, args.calls)
    files = sum(1 for path in args.headers.rglob("*") if path.is_file())
    size = sum(path.stat().st_size for path in args.headers.rglob("*") if path.is_file())
    print(f"library {args.library} ({args.library.stat().st_size} bytes)")
    print(f"headers {args.headers}: {files} files, {size} bytes")
    for label, wanted in (("1 call", calls[:1]), (f"{len(calls)} calls", calls)):
        wall, cpu, declared, defined = timed(args.headers, args.library, wanted, args.repeats)
        print(
            f"{label:>10}: {wall:7.2f} s wall, {cpu:7.2f} s CPU (medians of {args.repeats}); "
            f"declared {declared}, defined {defined}"
        )


if __name__ == "__main__":
    main()
