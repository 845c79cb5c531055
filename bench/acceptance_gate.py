"""The promotion gate's decision time and query count with 100 and with 10,000 runs in the database.

    DATABASE_URL=postgres://... SECRET_KEY=x .venv/bin/python bench/acceptance_gate.py

Two capabilities, each with five questions whose chains carry passed runs of every stage on the simulator
(so C1 would hold and C0 is blocked for want of hardware runs): first 100 runs in all, then 10,000. Each
measured call is a complete `capability_promote` to C0: lock, policy evaluation, the stored attempt and its
audit row. The query count
must not grow with the number of runs; the time should barely move (the latest run per stage comes from one
grouped query on an index).
"""

import statistics
import time

from acceptance_setup import Vendor, bench_database
from django.db import connection
from django.test.utils import CaptureQueriesContext

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain, Run
from acceptance.services import capability_promote, chain_start_for_answer
from tests.factories import make_capability, make_user

CAPABILITIES = 2
QUESTIONS_PER_CAPABILITY = 5
REPEAT = 15


def top_up(chains: list[Chain], total: int) -> None:
    """Passed runs on every chain's current inputs, round-robin over stages, until `total` runs exist."""
    missing = total - Run.objects.count()
    batch = []
    for index in range(missing):
        chain = chains[(index // len(stages.CHAIN_STAGES)) % len(chains)]
        stage = stages.CHAIN_STAGES[index % len(stages.CHAIN_STAGES)]
        batch.append(
            Run(
                chain=chain,
                stage=stage,
                target=chain.target,
                answer=chain.answer,
                state=stages.PASSED,
                verdict=stages.PASS,
                attempt=1,
                inputs_digest=chain.stage_digests[stage],
                progress=100,
            )
        )
    Run.objects.bulk_create(batch, batch_size=2000)


def measure(capability, pm) -> tuple[float, int, str]:
    times = []
    for _ in range(REPEAT):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            attempt = capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C0"))
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, len(queries), ",".join(r["code"] for r in attempt.reasons)


def main() -> None:
    with bench_database("gate", flush_redis=False):
        vendor = Vendor()
        pm = make_user("bench-pm", "team", "pm")
        capabilities = [vendor.capability] + [make_capability(f"bench-cap-{n}") for n in range(1, CAPABILITIES)]
        for capability in capabilities:
            vendor.capability = capability
            for _ in range(QUESTIONS_PER_CAPABILITY):
                chain_start_for_answer(vendor.answer(thresholds={}).pk)
        chains = list(Chain.objects.select_related("target", "answer"))
        target = capabilities[0]
        results = []
        for total in (100, 10_000):
            top_up(chains, total)
            milliseconds, queries, reasons = measure(target, pm)
            results.append((total, milliseconds, queries))
            print(
                f"{Run.objects.count():6d} runs, {len(chains)} chains: capability_promote to C0 median "
                f"{milliseconds:6.2f} ms, {queries} queries, blocked by {reasons}"
            )
    (_, small_ms, small_q), (_, large_ms, large_q) = results
    print(f"10,000 runs vs 100: time x{large_ms / small_ms:.2f}, queries {large_q} vs {small_q} (must be equal)")


if __name__ == "__main__":
    main()
