"""The soak's rates and counts as calculet computes them from each request's timings (issue 20.4), on
measurements built here: a closed loop that holds its load, and the same requests served one at a time."""

import json

import numpy as np

from acceptance.judging import soak_judgement, soak_load
from npu_sim.calbin.goldens import GoldenSet

PARAMS = {"requests": 4, "concurrency": 2, "output_tokens": 3, "min_decode_tokens_per_s": 10.0, "min_duration_s": 0.4}


def request(number: int, sent_ms: float, first_token_ms: float, gap_ms: float = 50.0) -> dict:
    times = [first_token_ms + gap_ms * step for step in range(3)]
    return {"request": number, "sent_ms": sent_ms, "token_ms": times, "error": None, "golden_sample": False}


def closed_loop() -> list[dict]:
    """Two clients: each sends its next request when the last token of its previous one arrives."""
    return [request(1, 0, 100), request(2, 0, 120), request(3, 200, 300), request(4, 220, 320)]


def test_a_closed_loop_that_holds_its_load_passes_with_the_figures_computed_from_its_timings():
    figures, failures = soak_load(closed_loop(), PARAMS, None)
    assert failures == []
    assert figures["decode_tokens_per_s"]["p50"] == 20.0  # two gaps of 50 ms per request
    assert figures["ttft_ms"]["p50"] == 100.0
    assert (figures["duration_ms"], figures["completed"]) == (420.0, 4)
    assert figures["request_latency_ms"]["mean"] == 205.0  # 200, 220, 200 and 200 ms from sending to the last token


def test_requests_served_one_at_a_time_do_not_hold_the_soak_s_concurrency():
    serial = [request(n + 1, 200.0 * n, 200.0 * n + 100) for n in range(4)]
    figures, failures = soak_load(serial, PARAMS, None)
    assert failures == [("load_not_held", "at most 1 requests were in flight at once; the soak holds 2")]
    assert figures["decode_tokens_per_s"]["p50"] == 20.0  # the rate alone would have passed


def test_a_request_cut_short_without_an_error_is_an_error_and_an_answer_s_rate_is_held():
    records = closed_loop()
    records[1]["token_ms"] = records[1]["token_ms"][:2]
    figures, failures = soak_load(records, {**PARAMS, "min_decode_tokens_per_s": 25.0}, None)
    assert failures == [
        ("errors_under_load", "1 requests failed under load: {'incomplete': 1}"),
        ("rate_below_threshold", "the median per-request decode rate is 20.0 token/s; the soak requires 25.0"),
    ]
    assert (figures["completed"], figures["error_count"]) == (3, 1)


def test_only_the_job_s_golden_samples_may_be_marked_as_such():
    """A request marked a golden sample is held to the golden's length: marking more would escape `output_tokens`."""
    records = closed_loop()
    records[0]["golden_sample"] = True
    figures, failures = soak_load(records, {**PARAMS, "golden_samples": 0}, None)
    assert ("golden_samples_mismatch", "1 requests are marked golden samples; the soak samples 0") in failures
    _, failures = soak_load(records, {**PARAMS, "golden_samples": 1}, None)
    assert failures == []


def test_golden_responses_that_name_no_request_of_the_load_prove_nothing(tmp_path):
    """Golden copies with no `request_ids` need never have been served among the load."""
    reference = golden_set()
    records = closed_loop()
    (tmp_path / "soak-requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    np.savez(
        tmp_path / "soak-golden-actual.npz",
        prefill_logits=np.stack([reference.prefill_logits[0]] * 2),
        decode_logits=np.stack([reference.decode_logits] * 2),
    )
    params = {**PARAMS, "golden_samples": 2}
    judged = soak_judgement({"verdict": "pass"}, tmp_path, reference, params)
    assert not judged.passed
    assert "soak-golden-actual.npz names no request_ids" in judged.reason
    assert "golden_samples_mismatch" in [f["code"] for f in judged.findings]  # and the load marks none


def golden_set() -> GoldenSet:
    rows = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    bits = (rows.view(np.uint32) >> 16).astype(np.uint16)
    prompt, tokens = np.array([1, 2, 3], dtype=np.int32), np.arange(2, dtype=np.int32)
    return GoldenSet("golden.npz", prompt, tokens, bits[:1], bits[1:])
