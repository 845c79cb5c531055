"""V37's trace delivery: the schema of the vendor's own trace format, a sample trace in that format, and the
converter that turns it into a Chrome trace (the format trace viewers read), which calculet runs.

The delivery is a directory (an unpacked tar) holding `schema.json`, `sample.json` and `convert.txt`, the
converter's command. The command runs in the sandbox (`isolated.run_isolated`) in a copy of the directory
without `sample.json`: it reads `trace.in` and writes `chrome-trace.json`. It passes when

- the schema is valid JSON Schema and accepts the sample (`rejects_sample` otherwise);
- the sample has events: its longest array of objects, wherever it is (`sample_has_no_events`);
- the converter ends cleanly and writes a Chrome trace: `traceEvents` (or a bare array) of objects with a
  string `ph` and `name`, numeric `pid`, `tid` and `ts` (metadata events, `ph` "M", need no `ts`), complete
  events (`ph` "X") a non-negative `dur` (`converter_failed`, `not_chrome_trace`);
- its events are the sample's: as many (metadata events aside), each named by a string of a sample event
  (`trace_events_mismatch`);
- it reads its input: given the sample without its last event it writes one event fewer
  (`converter_ignores_input`: a canned Chrome trace passes the first run only).
"""

import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from acceptance.inspection import Report
from acceptance.inspection.isolated import DEFAULT_LIMITS, run_isolated
from acceptance.inspection.schema import SchemaReport, schema_errors

SCHEMA = "schema.json"
SAMPLE = "sample.json"
COMMAND = "convert.txt"
INPUT = "trace.in"
OUTPUT = "chrome-trace.json"
MAX_JSON_BYTES = 32 * 1024 * 1024
LIMITS = replace(DEFAULT_LIMITS, wall_seconds=120, memory_bytes=1024**3)


def check_trace_delivery(bundle: Path, *, limits=LIMITS) -> SchemaReport:
    report = SchemaReport()
    bundle = Path(bundle)
    missing = [name for name in (SCHEMA, SAMPLE, COMMAND) if not (bundle / name).is_file()]
    if missing:
        report.add("delivery_incomplete", f"the trace delivery has no {', '.join(missing)}", missing=missing)
        return report
    schema, sample = _json(bundle / SCHEMA, report), _json(bundle / SAMPLE, report)
    command = (bundle / COMMAND).read_text(encoding="utf-8", errors="replace").strip()
    if schema is None or sample is None:
        return report
    errors = schema_errors(schema, sample, SAMPLE, report)
    if errors is None:
        return report
    if errors:
        report.add("rejects_sample", f"the schema rejects its own sample: {errors[0]}", errors=errors)
    events = _events(sample)
    report.checked.update(command=command, sample_events=len(events))
    if not events:
        report.add("sample_has_no_events", "the sample holds no array of events (objects)")
        return report
    converted = _convert(bundle, command, sample, 1, report, limits)
    if converted is None:
        return report
    _compare(events, converted, report)
    if report.findings:
        return report
    fewer = _convert(bundle, command, _without_last_event(sample, events), 2, report, limits)
    if fewer is not None and len(fewer) != len(events) - 1:
        report.add(
            "converter_ignores_input",
            f"given the sample without its last event the converter wrote {len(fewer)} events, not "
            f"{len(events) - 1}: it does not convert what it reads",
        )
    return report


def _json(path: Path, report: Report) -> Any:
    if path.stat().st_size > MAX_JSON_BYTES:
        report.add("file_too_large", f"{path.name} is larger than {MAX_JSON_BYTES} bytes", file=path.name)
        return None
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        report.add("not_json", f"{path.name} is not JSON: {error}", file=path.name)
        return None


def _events(document: Any) -> list[dict]:
    """The longest array of objects anywhere in the document: the trace's events, whatever the format."""
    best: list[dict] = []
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            if len(node) > len(best) and all(isinstance(item, dict) for item in node):
                best = node  # the list itself, which `_without_last_event` finds again
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return best


def _without_last_event(document: Any, events: list[dict]) -> Any:
    """The document with the last of `events` (the very list object) left out."""
    if document is events:
        return events[:-1]
    if isinstance(document, list):
        return [_without_last_event(item, events) for item in document]
    if isinstance(document, dict):
        return {key: _without_last_event(value, events) for key, value in document.items()}
    return document


def _convert(bundle: Path, command: str, sample: Any, number: int, report: Report, limits) -> list[dict] | None:
    """The converter run on `sample` in a fresh copy of the delivery; its Chrome trace's events (metadata events
    left out), or None when it failed or wrote no Chrome trace."""
    scratch = Path(tempfile.mkdtemp(prefix=f"calculet-trace-{number}-"))
    try:
        workdir = scratch / "convert"
        shutil.copytree(bundle, workdir, symlinks=True)
        (workdir / SAMPLE).unlink()
        (workdir / INPUT).write_text(json.dumps(sample), encoding="utf-8")
        ran = run_isolated(["/bin/sh", "-c", command], workdir=workdir, limits=limits)
        report.checked.setdefault("runs", []).append({"run": number, **ran.record})
        if not ran.outcome.clean_exit:
            report.add("converter_failed", f"the converter failed: {ran.outcome.reason}", output_tail=ran.output_tail)
            return None
        if not (workdir / OUTPUT).is_file():
            report.add("converter_failed", f"the converter wrote no {OUTPUT}")
            return None
        return _chrome_events(_json(workdir / OUTPUT, report), report)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _chrome_events(document: Any, report: Report) -> list[dict] | None:
    if document is None:
        return None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    unit = document.get("displayTimeUnit", "ms") if isinstance(document, dict) else "ms"
    if unit not in ("ms", "ns"):
        report.add("not_chrome_trace", f"{OUTPUT}'s displayTimeUnit is {unit!r}, not ms or ns")
        return None
    if not isinstance(events, list):
        report.add("not_chrome_trace", f"{OUTPUT} has no traceEvents array")
        return None
    timed = []
    for index, event in enumerate(events):
        wrong = _chrome_event_error(event)
        if wrong:
            report.add("not_chrome_trace", f"{OUTPUT} event {index}: {wrong}", event=index)
            return None
        if event["ph"] != "M":
            timed.append(event)
    return timed


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _chrome_event_error(event: Any) -> str:
    if not isinstance(event, dict):
        return "not an object"
    for key in ("ph", "name"):
        if not isinstance(event.get(key), str) or not event[key]:
            return f"no {key}"
    for key in ("pid", "tid"):
        if not _number(event.get(key)):
            return f"{key} is not a number"
    if event["ph"] != "M" and not _number(event.get("ts")):
        return "ts is not a number"
    if event["ph"] == "X" and not (_number(event.get("dur")) and event["dur"] >= 0):
        return "a complete event (X) without a non-negative dur"
    return ""


def _strings(node: Any) -> set[str]:
    if isinstance(node, str):
        return {node}
    if isinstance(node, dict):
        return set().union(*(_strings(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_strings(value) for value in node))
    return set()


def _compare(events: list[dict], converted: list[dict], report: Report) -> None:
    report.checked["converted_events"] = len(converted)
    if len(converted) != len(events):
        report.add(
            "trace_events_mismatch",
            f"the sample has {len(events)} events, the converter's Chrome trace {len(converted)}",
            expected=len(events),
            actual=len(converted),
        )
        return
    named = _strings(events)
    unknown = sorted({event["name"] for event in converted} - named)
    if unknown:
        report.add(
            "trace_events_mismatch",
            f"the converter's Chrome trace names events the sample does not: {', '.join(unknown[:5])}",
            names=unknown[:5],
        )
