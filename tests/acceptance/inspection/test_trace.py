"""V37: the vendor's own trace format, held to its schema, its sample and the converter calculet runs."""

import copy
import json

import pytest

from acceptance.inspection.trace import check_trace_delivery
from tests.inspection_builders import (
    TRACE_CONVERTER,
    VENDOR_TRACE_FIELDS,
    VENDOR_TRACE_SAMPLE,
    VENDOR_TRACE_SCHEMA,
    trace_delivery,
)


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_the_vendors_own_format_with_its_converter_passes(tmp_path):
    """Not a Chrome trace and not npu_sim's export: the vendor's records in cycles, converted by its parser."""
    report = check_trace_delivery(trace_delivery(tmp_path / "d"))
    assert report.passed, report.findings
    assert report.checked["sample_events"] == 4 and report.checked["converted_events"] == 4
    assert report.checked["varied_events"] == 6  # one left out, a nested span of three added
    assert [run["run"] for run in report.checked["runs"]] == [1, 2]  # the sample, then the sample varied


def test_a_draft_7_schema_applies_too(tmp_path):
    schema = {**VENDOR_TRACE_SCHEMA, "$schema": "http://json-schema.org/draft-07/schema#"}
    report = check_trace_delivery(trace_delivery(tmp_path / "d", schema=schema))
    assert report.passed, report.findings
    assert report.draft == "http://json-schema.org/draft-07/schema"


def test_a_schema_rejecting_its_own_sample_fails_naming_why(tmp_path):
    schema = copy.deepcopy(VENDOR_TRACE_SCHEMA)
    schema["required"].append("format_version")
    report = check_trace_delivery(trace_delivery(tmp_path / "d", schema=schema))
    assert codes(report) == ["rejects_sample"]
    assert "format_version" in report.findings[0].message


def test_a_converter_that_drops_an_event_fails(tmp_path):
    dropping = TRACE_CONVERTER.replace('for record in trace["records"]:', 'for record in trace["records"][1:]:')
    report = check_trace_delivery(trace_delivery(tmp_path / "d", converter=dropping))
    assert [f.message for f in report.findings] == [
        "the sample has 4 events, the converter's Chrome trace 3 duration events (X, or B and E)"
    ]


def test_a_canned_chrome_trace_that_ignores_its_input_fails(tmp_path):
    """A converter that writes the right Chrome trace whatever it reads passes the first run, not the second."""
    root = trace_delivery(tmp_path / "d")
    (root / "canned.json").write_text(json.dumps(_converted(VENDOR_TRACE_SAMPLE)))
    (root / "convert.txt").write_text("cp canned.json chrome-trace.json\n")
    report = check_trace_delivery(root)
    assert codes(report) == ["converter_ignores_input"]
    assert "wrote 4 events, not 6" in report.findings[0].message


def test_events_named_otherwise_than_the_samples_fail(tmp_path):
    renamed = TRACE_CONVERTER.replace('"name": record["op"]', '"name": "op"')
    report = check_trace_delivery(trace_delivery(tmp_path / "d", converter=renamed))
    assert [f.message for f in report.findings] == ["the converter's Chrome trace names events the sample does not: op"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ('"dur": record["cycles"] / per_us', "a complete event (X) without a non-negative dur"),
        ('"ts": record["start_cycle"] / per_us', "ts is not a number"),
        ('"displayTimeUnit": "ns"', "displayTimeUnit is 'MB'"),
    ],
    ids=["negative-duration", "event-without-time", "impossible-unit"],
)
def test_a_converter_writing_no_valid_chrome_trace_fails(tmp_path, change, said):
    broken = {
        '"dur": record["cycles"] / per_us': '"dur": -1',
        '"ts": record["start_cycle"] / per_us': '"ts": "soon"',
        '"displayTimeUnit": "ns"': '"displayTimeUnit": "MB"',
    }[change]
    report = check_trace_delivery(trace_delivery(tmp_path / "d", converter=TRACE_CONVERTER.replace(change, broken)))
    assert codes(report) == ["not_chrome_trace"]
    assert said in report.findings[0].message


def test_a_converter_that_fails_or_writes_nothing_fails(tmp_path):
    report = check_trace_delivery(trace_delivery(tmp_path / "a", converter="raise SystemExit(3)\n"))
    assert codes(report) == ["converter_failed"]
    report = check_trace_delivery(trace_delivery(tmp_path / "b", converter="pass\n"))
    assert [f.message for f in report.findings] == ["the converter wrote no chrome-trace.json"]


def test_a_delivery_without_its_converter_or_a_sample_with_no_events_fails(tmp_path):
    root = trace_delivery(tmp_path / "a")
    (root / "convert.txt").unlink()
    assert [f.message for f in check_trace_delivery(root).findings] == ["the trace delivery has no convert.txt"]
    empty = {"clock_hz": 1, "records": []}
    assert codes(check_trace_delivery(trace_delivery(tmp_path / "b", sample=empty))) == ["sample_has_no_events"]


def _converted(sample: dict) -> dict:
    per_us = sample["clock_hz"] / 1e6
    return {
        "traceEvents": [
            {
                "name": r["op"],
                "ph": "X",
                "pid": 0,
                "tid": r["chiplet"],
                "ts": r["start_cycle"] / per_us,
                "dur": r["cycles"] / per_us,
            }
            for r in sample["records"]
        ]
    }


def test_a_converter_that_rounds_to_whole_microseconds_and_sorts_its_events_passes(tmp_path):
    """Chrome's unit is the microsecond, and its events may come in any order: neither is a difference. (Each
    start and end rounded keeps the nesting; a duration rounded on its own can break it.)"""
    sample = copy.deepcopy(VENDOR_TRACE_SAMPLE)
    sample["records"][2]["cycles"] = 1400  # softmax lasts 1.4 µs
    rounding = TRACE_CONVERTER.replace(
        '"ts": record["start_cycle"] / per_us, "dur": record["cycles"] / per_us})',
        '"ts": round(record["start_cycle"] / per_us),'
        ' "dur": round((record["start_cycle"] + record["cycles"]) / per_us) - round(record["start_cycle"] / per_us)})'
        "\nevents.reverse()",
    )
    report = check_trace_delivery(trace_delivery(tmp_path / "d", sample=sample, converter=rounding))
    assert report.passed, report.findings


@pytest.mark.parametrize(
    ("change", "code", "said"),
    [
        # The unit ignored: cycles written as microseconds.
        ('record["start_cycle"] / per_us, "dur": record["cycles"] / per_us', "time_unit_mismatch", "1000 times"),
        # Every event 250 µs late.
        ('"ts": record["start_cycle"] / per_us', "clock_shifted", "starts 250 µs off"),
        # One event off: softmax written 3 µs late.
        ('"ts": record["start_cycle"] / per_us', "event_time_mismatch", "softmax (the sample's event 2"),
        # Every chiplet's events on one thread.
        ('"tid": record["chiplet"]', "thread_mismatch", "the sample's thread [0]"),
        # Each end a microsecond late (an inclusive end): within the rounding, but softmax now overlaps attention.
        ('"dur": record["cycles"] / per_us', "nesting_mismatch", "attention_qk ends before softmax starts"),
    ],
    ids=["unit-ignored", "all-shifted", "one-event-off", "threads-merged", "ends-overlap"],
)
def test_a_converter_getting_the_times_or_threads_wrong_fails_naming_why(tmp_path, change, code, said):
    wrong = {
        "time_unit_mismatch": 'record["start_cycle"], "dur": record["cycles"]',
        "clock_shifted": '"ts": record["start_cycle"] / per_us + 250',
        "event_time_mismatch": '"ts": record["start_cycle"] / per_us + (3 if record["op"] == "softmax" else 0)',
        "thread_mismatch": '"tid": 0',
        "nesting_mismatch": '"dur": record["cycles"] / per_us + 1',
    }[code]
    report = check_trace_delivery(trace_delivery(tmp_path / "d", converter=TRACE_CONVERTER.replace(change, wrong)))
    assert codes(report) == [code]
    assert said in report.findings[0].message, report.findings[0].message
    assert report.checked["first_mismatch"]["thread"]


@pytest.mark.parametrize(
    ("change", "wrong", "code"),
    [
        ('per_us = trace["clock_hz"] / 1e6', "per_us = 1000", "time_unit_mismatch"),
        (
            'record["start_cycle"] / per_us',
            '(record["start_cycle"] - trace["records"][0]["start_cycle"]) / per_us',
            "clock_shifted",
        ),
    ],
    ids=["clock-hard-coded", "times-relative-to-the-first-event"],
)
def test_a_converter_right_on_the_sample_alone_fails_on_the_varied_sample(tmp_path, change, wrong, code):
    """The sample runs at 1 GHz and starts at 0: a hard-coded clock or relative times get it right by chance."""
    report = check_trace_delivery(trace_delivery(tmp_path / "d", converter=TRACE_CONVERTER.replace(change, wrong)))
    assert codes(report) == [code]
    assert report.findings[0].message.startswith("on the sample varied")


def test_a_sample_in_nanoseconds_converts_without_a_clock(tmp_path):
    fields = {**VENDOR_TRACE_FIELDS, "unit": "ns", "start": "start_ns", "duration": "ns"}
    fields.pop("clock_hz")
    sample = {"records": [{"op": "a", "chiplet": 0, "start_ns": 1500, "ns": 2500}]}
    converter = """import json
records = json.load(open("trace.in"))["records"]
events = [{"name": r["op"], "ph": "X", "pid": 1, "tid": r["chiplet"], "ts": r["start_ns"] / 1000, "dur": r["ns"] / 1000}
          for r in records]
json.dump(events, open("chrome-trace.json", "w"))
"""
    record = {"type": "object", "required": ["start_ns", "ns"], "properties": {"start_ns": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"records": {"type": "array", "items": record}}}
    report = check_trace_delivery(
        trace_delivery(tmp_path / "d", schema=schema, sample=sample, fields=fields, converter=converter)
    )
    assert report.passed, report.findings


def test_fields_undeclared_or_not_in_the_sample_fail_naming_them(tmp_path):
    fields = {key: value for key, value in VENDOR_TRACE_FIELDS.items() if key != "clock_hz"}
    report = check_trace_delivery(trace_delivery(tmp_path / "a", fields=fields))
    assert [f.message for f in report.findings] == ["fields.json does not say clock_hz"]
    report = check_trace_delivery(trace_delivery(tmp_path / "b", fields={**VENDOR_TRACE_FIELDS, "unit": "tick"}))
    assert codes(report) == ["fields_undeclared"] and "'tick'" in report.findings[0].message
    report = check_trace_delivery(trace_delivery(tmp_path / "c", fields={**VENDOR_TRACE_FIELDS, "start": "begin"}))
    assert codes(report) == ["fields_not_in_sample"] and "event 0" in report.findings[0].message


def test_begin_and_end_events_count_as_one_duration_and_an_unended_begin_fails(tmp_path):
    """Chrome's B/E pairs are as valid as X events: a B closed by the next E on its thread is one event."""
    begin_end = TRACE_CONVERTER.replace(
        """    events.append({"name": record["op"], "ph": "X", "pid": 0, "tid": record["chiplet"],
                   "ts": record["start_cycle"] / per_us, "dur": record["cycles"] / per_us})""",
        """    start, end = record["start_cycle"] / per_us, (record["start_cycle"] + record["cycles"]) / per_us
    events.append({"name": record["op"], "ph": "B", "pid": 0, "tid": record["chiplet"], "ts": start})
    events.append({"ph": "E", "pid": 0, "tid": record["chiplet"], "ts": end})
events.sort(key=lambda event: (event.get("ts", -1), event["ph"] == "B"))""",
    )
    assert begin_end != TRACE_CONVERTER
    report = check_trace_delivery(trace_delivery(tmp_path / "a", converter=begin_end))
    assert report.passed, report.findings
    unended = begin_end.replace('events.append({"ph": "E"', 'record["op"] == "softmax" or events.append({"ph": "E"')
    report = check_trace_delivery(trace_delivery(tmp_path / "b", converter=unended))
    assert codes(report) == ["not_chrome_trace"] and "a begin (B) never ended" in report.findings[0].message


# A sample with instants (a token written) and counters (HBM bytes in use), and a converter that writes them.
MARKED_SAMPLE = {
    **VENDOR_TRACE_SAMPLE,
    "markers": [
        {"op": "token_out", "chiplet": 0, "start_cycle": 4500},
        {"op": "token_out", "chiplet": 1, "start_cycle": 13000},
    ],
    "counters": [
        {"op": "hbm_bytes", "start_cycle": 2000, "bytes": 65536},
        {"op": "hbm_bytes", "start_cycle": 9000, "bytes": 131072},
    ],
}
MARKED_FIELDS = {**VENDOR_TRACE_FIELDS, "instants": "markers", "counters": "counters", "value": "bytes"}
MARKED_CONVERTER = TRACE_CONVERTER.replace(
    "json.dump(",
    """for mark in trace["markers"]:
    events.append({"name": mark["op"], "ph": "i", "s": "t", "pid": 0, "tid": mark["chiplet"],
                   "ts": mark["start_cycle"] / per_us})
for counter in trace["counters"]:
    events.append({"name": counter["op"], "ph": "C", "pid": 0, "ts": counter["start_cycle"] / per_us,
                   "args": {"bytes": counter["bytes"]}})
json.dump(""",
)


def _marked(root, converter=MARKED_CONVERTER, fields=MARKED_FIELDS):
    return check_trace_delivery(trace_delivery(root, sample=MARKED_SAMPLE, fields=fields, converter=converter))


def test_instants_and_counters_converted_right_pass(tmp_path):
    """Instants on their thread at their time, counters at their time with their value (a counter needs no tid)."""
    assert MARKED_CONVERTER != TRACE_CONVERTER
    report = _marked(tmp_path / "d")
    assert report.passed, report.findings


def test_a_sample_without_instants_or_counters_ignores_the_converters(tmp_path):
    """As before the two kinds were compared: fields.json names none, so none is asked for or compared."""
    report = check_trace_delivery(trace_delivery(tmp_path / "d", sample=MARKED_SAMPLE, converter=MARKED_CONVERTER))
    assert report.passed, report.findings


@pytest.mark.parametrize(
    ("change", "wrong", "code", "said"),
    [
        (
            'for mark in trace["markers"]:',
            'for mark in trace["markers"][1:]:',
            "instant_mismatch",
            "the sample has 2 instants, the converter's Chrome trace 1 (ph i or I)",
        ),
        (
            '"ts": mark["start_cycle"] / per_us',
            '"ts": mark["start_cycle"] / per_us + 3',
            "instant_mismatch",
            "the sample's instant token_out (instants 0, thread [0]) at 4.5 µs is at 7.5 µs",
        ),
        (
            '"tid": mark["chiplet"]',
            '"tid": 0',
            "instant_mismatch",
            "the sample's instant token_out (instants 1, thread [1]) at 13 µs is no instant event (ph i or I) on "
            "that thread's Chrome thread",
        ),
        (
            'for counter in trace["counters"]:',
            'for counter in trace["counters"][:1]:',
            "counter_mismatch",
            "the sample has 2 counters, the converter's Chrome trace 1 (ph C)",
        ),
        (
            '"ts": counter["start_cycle"] / per_us',
            '"ts": counter["start_cycle"] / per_us / 1000',
            "counter_mismatch",
            "the sample's counter hbm_bytes (counters 0) at 2 µs, value 65536, is at 0.002 µs",
        ),
        (
            '"args": {"bytes": counter["bytes"]}',
            '"args": {"kib": counter["bytes"] / 1024}',
            "counter_mismatch",
            "the sample's counter hbm_bytes (counters 0) at 2 µs, value 65536, has args values 64 in",
        ),
        (
            '"ph": "i", "s": "t"',
            '"ph": "n"',
            "instant_mismatch",
            "the sample has 2 instants, the converter's Chrome trace 0",
        ),
    ],
    ids=[
        "instant-dropped",
        "instant-late",
        "instant-thread-merged",
        "counter-dropped",
        "counter-unit-ignored",
        "counter-value-changed",
        "instant-as-other-phase",
    ],
)
def test_instants_or_counters_dropped_mistimed_or_changed_fail_naming_the_event(tmp_path, change, wrong, code, said):
    converter = MARKED_CONVERTER.replace(change, wrong)
    assert converter != MARKED_CONVERTER
    report = _marked(tmp_path / "d", converter=converter)
    assert codes(report) == [code]
    assert said in report.findings[0].message, report.findings[0].message


def test_instants_hard_coded_fail_on_the_varied_sample(tmp_path):
    """Times made relative to the first event are right on the sample (it starts at 0), not when varied."""
    relative = MARKED_CONVERTER.replace(
        '"ts": mark["start_cycle"] / per_us',
        '"ts": (mark["start_cycle"] - trace["records"][0]["start_cycle"]) / per_us',
    )
    report = _marked(tmp_path / "d", converter=relative)
    assert codes(report) == ["instant_mismatch"]
    assert report.findings[0].message.startswith("on the sample varied")
    assert report.checked["first_mismatch"]["varied"] is True


def test_counters_without_their_value_field_or_not_in_the_sample_fail(tmp_path):
    fields = {key: value for key, value in MARKED_FIELDS.items() if key != "value"}
    report = _marked(tmp_path / "a", fields=fields)
    assert [f.message for f in report.findings] == ["fields.json names counters and does not say value"]
    report = _marked(tmp_path / "b", fields={**MARKED_FIELDS, "value": "kib"})
    assert codes(report) == ["fields_not_in_sample"] and "counters 0" in report.findings[0].message


def test_the_panel_names_the_instant_or_counter_that_differs(tmp_path):
    from acceptance.selectors import _trace_mismatch

    late = _marked(tmp_path / "a", converter=MARKED_CONVERTER.replace('mark["start_cycle"] / per_us', "0"))
    assert _trace_mismatch(late.checked["first_mismatch"]) == (
        "instant token_out (thread [0]): the sample says 4.5 µs, the Chrome trace 0 µs"
    )
    changed = _marked(tmp_path / "b", converter=MARKED_CONVERTER.replace('counter["bytes"]}', "1}"))
    assert _trace_mismatch(changed.checked["first_mismatch"]) == (
        "counter hbm_bytes: the sample says 65536 at 2.0 µs, the Chrome trace 1 at 2.0 µs"
    )


def _varied_as_it_was(sample: dict) -> dict:
    """The one varied sample every check used to run: the last event left out, 1000 µs later, the clock doubled."""
    varied = copy.deepcopy(sample)
    del varied["records"][-1]
    shift = 1000 * sample["clock_hz"] // 10**6
    for record in varied["records"]:
        record["start_cycle"] += shift
    varied["clock_hz"] *= 2
    return varied


def test_a_canned_chrome_trace_for_each_run_fails(tmp_path):
    """A converter that counts the records it reads and copies one of two Chrome traces made beforehand: it passed
    while the varied sample was the same for every check."""
    root = trace_delivery(tmp_path / "d")
    (root / "sample-trace.json").write_text(json.dumps(_converted(VENDOR_TRACE_SAMPLE)))
    (root / "varied-trace.json").write_text(json.dumps(_converted(_varied_as_it_was(VENDOR_TRACE_SAMPLE))))
    (root / "convert.txt").write_text(
        'if [ "$(grep -o start_cycle trace.in | wc -l)" -eq 4 ]; then cp sample-trace.json chrome-trace.json; '
        "else cp varied-trace.json chrome-trace.json; fi\n"
    )
    for seed in range(3):
        report = check_trace_delivery(root, seed=seed)
        assert report.findings and report.findings[0].message.startswith("on the sample varied"), report.findings
        assert report.checked["varied"]["seed"] == seed


# A sample of one event per thread, none nested: the sample alone compares neither threads nor nesting.
FLAT_SAMPLE = {
    "clock_hz": 1_000_000_000,
    "records": [
        {"op": "embedding", "chiplet": 0, "start_cycle": 0, "cycles": 4000},
        {"op": "attention", "chiplet": 1, "start_cycle": 5000, "cycles": 1000},
        {"op": "lm_head", "chiplet": 2, "start_cycle": 7000, "cycles": 2000},
    ],
}


@pytest.mark.parametrize(
    ("change", "wrong", "code"),
    [
        # A thread for each event, whatever the sample says.
        ('"tid": record["chiplet"]', '"tid": len(events)', "thread_mismatch"),
        # Each end a microsecond late: two events that meet then overlap.
        ('"dur": record["cycles"] / per_us', '"dur": record["cycles"] / per_us + 1', "nesting_mismatch"),
    ],
    ids=["a-thread-per-event", "ends-overlap"],
)
def test_a_sample_without_nesting_or_shared_threads_still_has_them_compared(tmp_path, change, wrong, code):
    """The varied sample always holds a nested span on a thread of several events: a converter wrong on threads
    or nesting fails even when the vendor's sample has neither to compare."""
    converter = TRACE_CONVERTER.replace(change, wrong)
    for seed in range(5):
        report = check_trace_delivery(
            trace_delivery(tmp_path / f"d{seed}", sample=FLAT_SAMPLE, converter=converter), seed=seed
        )
        assert codes(report) == [code], report.findings
        assert report.findings[0].message.startswith("on the sample varied")
        assert "added nested on the thread of its event" in report.checked["varied"]["how"]
    right = check_trace_delivery(trace_delivery(tmp_path / "right", sample=FLAT_SAMPLE))
    assert right.passed, right.findings


def test_the_varied_sample_differs_from_one_check_to_the_next(tmp_path):
    root = trace_delivery(tmp_path / "d")
    hows = {check_trace_delivery(root, seed=seed).checked["varied"]["how"] for seed in range(4)}
    assert len(hows) == 4


NAN_TIMES = """import json
trace = json.load(open("trace.in"))
begins = [{"name": r["op"], "ph": "B", "pid": 0, "tid": r["chiplet"], "ts": float("nan")} for r in trace["records"]]
ends = [{"ph": "E", "pid": 0, "tid": r["chiplet"], "ts": float("nan")} for r in trace["records"]]
json.dump({"traceEvents": begins + ends}, open("chrome-trace.json", "w"))
"""


def test_a_chrome_trace_timed_nan_fails_as_not_json(tmp_path):
    """NaN is no JSON number, and a time compared with NaN is never off: begin and end events at NaN passed every
    comparison of a sample without nesting."""
    sample = {
        "clock_hz": 1_000_000_000,
        "records": [
            {"op": "a", "chiplet": 0, "start_cycle": 0, "cycles": 4000},
            {"op": "b", "chiplet": 0, "start_cycle": 5000, "cycles": 1000},
            {"op": "c", "chiplet": 1, "start_cycle": 5000, "cycles": 9000},
        ],
    }
    report = check_trace_delivery(trace_delivery(tmp_path / "d", sample=sample, converter=NAN_TIMES))
    assert codes(report) == ["not_json"]
    assert "chrome-trace.json is not JSON: NaN is not JSON" in report.findings[0].message


def test_a_sample_timed_nan_fails_as_not_json(tmp_path):
    """A sample's NaN start made any time the converter wrote for that event right."""
    root = trace_delivery(tmp_path / "d", schema={"type": "object"})
    (root / "sample.json").write_text(
        json.dumps(VENDOR_TRACE_SAMPLE).replace('"start_cycle": 4000', '"start_cycle": NaN')
    )
    report = check_trace_delivery(root)
    assert codes(report) == ["not_json"] and "sample.json" in report.findings[0].message
    (root / "sample.json").write_text(
        json.dumps(VENDOR_TRACE_SAMPLE).replace('"start_cycle": 4000', '"start_cycle": 1e999')
    )
    assert "past a double's range" in check_trace_delivery(root).findings[0].message


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "object"}, "without its start (start_cycle)"),
        (
            {**VENDOR_TRACE_SCHEMA, "properties": {**VENDOR_TRACE_SCHEMA["properties"], "records": {"type": "array"}}},
            "without its start (start_cycle)",
        ),
    ],
    ids=["any-object", "records-of-anything"],
)
def test_a_trace_schema_that_describes_no_event_fails(tmp_path, schema, said):
    """The schema of the vendor's format: one that accepts any object, or records of anything, describes nothing."""
    report = check_trace_delivery(trace_delivery(tmp_path / "d", schema=schema))
    assert codes(report)[0] == "schema_describes_no_event"
    assert said in report.findings[0].message


def test_a_counter_holding_every_value_of_the_sample_fails(tmp_path):
    """Each counter event with all the sample's counter values in its args: its own value was among them."""
    every = MARKED_CONVERTER.replace(
        '"args": {"bytes": counter["bytes"]}',
        '"args": {f"v{i}": c["bytes"] for i, c in enumerate(trace["counters"])}',
    )
    assert every != MARKED_CONVERTER
    report = _marked(tmp_path / "d", converter=every)
    assert codes(report) == ["counter_mismatch"]
    assert "has args values 65536, 131072" in report.findings[0].message
