"""The soak's rates and counts as calculet computes them from each request's timings (issue 20.4), on
measurements built here: a closed loop that holds its load, and the same requests served one at a time."""

from acceptance.judging import soak_load

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
