"""V37: the vendor's own trace format, held to its schema, its sample and the converter calculet runs."""

import copy
import json

import pytest

from acceptance.inspection.trace import check_trace_delivery
from tests.inspection_builders import TRACE_CONVERTER, VENDOR_TRACE_SAMPLE, VENDOR_TRACE_SCHEMA, trace_delivery


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_the_vendors_own_format_with_its_converter_passes(tmp_path):
    """Not a Chrome trace and not npu_sim's export: the vendor's records in cycles, converted by its parser."""
    report = check_trace_delivery(trace_delivery(tmp_path / "d"))
    assert report.passed, report.findings
    assert report.checked["sample_events"] == 3 and report.checked["converted_events"] == 3
    assert [run["run"] for run in report.checked["runs"]] == [1, 2]  # the sample, then the sample less one event


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
    assert [f.message for f in report.findings] == ["the sample has 3 events, the converter's Chrome trace 2"]


def test_a_canned_chrome_trace_that_ignores_its_input_fails(tmp_path):
    """A converter that writes the right Chrome trace whatever it reads passes the first run, not the second."""
    root = trace_delivery(tmp_path / "d")
    (root / "canned.json").write_text(json.dumps(_converted(VENDOR_TRACE_SAMPLE)))
    (root / "convert.txt").write_text("cp canned.json chrome-trace.json\n")
    report = check_trace_delivery(root)
    assert codes(report) == ["converter_ignores_input"]
    assert "wrote 3 events, not 2" in report.findings[0].message


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
            {"name": r["op"], "ph": "X", "pid": 0, "tid": r["chiplet"], "ts": r["start_cycle"] / per_us, "dur": 1}
            for r in sample["records"]
        ]
    }
