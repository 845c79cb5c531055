"""What the seed import costs: the first import, a re-import that finds nothing to do (what every start of
`scripts/dev.py run` pays), and the same re-import for a document with every table full (99 rows each).

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/seed_import.py

Runs on a throw-away database (bench_<name>) created and dropped here. Prints times and query counts,
and ratios against parsing the seed alone (the baseline of the same run).
"""

import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from evidence.seed.importer import DEFAULT_PATH, checklist_import  # noqa: E402
from evidence.seed.parser import parse_checklist  # noqa: E402

REPEAT = 5


def full_tables(text: str) -> str:
    """Every evidence table and the last question table filled up to code 99."""
    lines = text.splitlines()
    last_row: dict[str, int] = {}
    for index, line in enumerate(lines):
        if match := re.match(r"^\| ([A-Z])(\d\d) \|", line):
            last_row[match.group(1)] = index
    for letter, index in sorted(last_row.items(), key=lambda kv: -kv[1]):
        count = sum(1 for line in lines if line.startswith(f"| {letter}"))
        if letter == "V":
            extra = [f"| V{n:02d} | 问题 {n} | 答案 {n} |" for n in range(count + 1, 100)]
        else:
            extra = [
                f"| {letter}{n:02d} | 结论 {n} | `$SRC/src/f{n}.cpp:{n}-{n + 5}` | E1/C0 |"
                for n in range(count + 1, 100)
            ]
        lines[index + 1 : index + 1] = extra
    return "\n".join(lines) + "\n"


def timed(function, repeat=REPEAT) -> tuple[float, int]:
    """Median milliseconds and the query count of the last run."""
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            function()
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), len(queries)


def main() -> None:
    seed = DEFAULT_PATH.read_text(encoding="utf-8")
    big = full_tables(seed)
    settings.DATABASES["default"]["TEST"]["NAME"] = "bench_" + settings.DATABASES["default"]["NAME"]
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        parse_ms, _ = timed(lambda: parse_checklist(seed))
        first_ms, first_queries = timed(lambda: checklist_import(seed), repeat=1)
        noop_ms, noop_queries = timed(lambda: checklist_import(seed))
        big_first_ms, big_first_queries = timed(lambda: checklist_import(big), repeat=1)
        big_noop_ms, big_noop_queries = timed(lambda: checklist_import(big))
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    rows = len(parse_checklist(seed).items) + 60
    big_rows = len(parse_checklist(big).items) + len(parse_checklist(big).questions)
    print(f"parse seed ({rows} rows)            {parse_ms:8.1f} ms   1.0x (baseline)")
    print(f"first import                     {first_ms:8.1f} ms {first_ms / parse_ms:5.1f}x  {first_queries} queries")
    print(f"re-import, nothing to do         {noop_ms:8.1f} ms {noop_ms / parse_ms:5.1f}x  {noop_queries} queries")
    print(
        f"import adding to {big_rows} rows        {big_first_ms:8.1f} ms {big_first_ms / parse_ms:5.1f}x  "
        f"{big_first_queries} queries"
    )
    print(
        f"re-import {big_rows} rows, nothing to do {big_noop_ms:8.1f} ms {big_noop_ms / parse_ms:5.1f}x  "
        f"{big_noop_queries} queries"
    )
    print(
        f"no-op re-import: {big_rows / rows:.1f}x the rows cost {big_noop_ms / noop_ms:.1f}x the time, "
        f"{big_noop_queries / noop_queries:.1f}x the queries"
    )


if __name__ == "__main__":
    main()
