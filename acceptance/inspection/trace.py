"""V37's trace delivery: the schema of the vendor's own trace format, a sample trace in that format, and the
converter that turns it into a Chrome trace (the format trace viewers read), which calculet runs.

The delivery is a directory (an unpacked tar) holding `schema.json`, `sample.json`, `fields.json` and
`convert.txt`, the converter's command. `fields.json` says where the sample keeps what a trace is for: the events
(`events`, a dotted path in the sample), and in each event its `name`, its `thread` (a field or a list of
fields), its `start` and `duration` and their `unit` (s, ms, us, ns, ps, or cycle with `clock_hz` the dotted path
of the sample's clock frequency). Two kinds are optional, for a sample that has them: `instants`, the dotted path
of its instant events (a name, a thread and a start, read with the same fields), and `counters`, that of its
counter events (a name, a start and `value`, the field of the counter's value). From it calculet works out the
Chrome events the sample must become: a Chrome trace counts in microseconds. The command runs in the sandbox
(`isolated.run_isolated`) in a copy of the directory without `sample.json`: it reads `trace.in` and writes
`chrome-trace.json`. It passes when

- the schema is valid JSON Schema and accepts the sample (`rejects_sample`), and describes its events: it rejects
  the sample with its first event's start or duration removed or its start a string (`schema_describes_no_event`);
- `fields.json` names the fields and every event of the sample has them, with numeric times
  (`fields_undeclared`, `fields_not_in_sample`, `sample_has_no_events`);
- the converter ends cleanly and writes a Chrome trace: `traceEvents` (or a bare array) of objects with a
  string `ph` and `name`, numeric `pid`, `tid` and `ts` (metadata events, `ph` "M", need no `ts`, counters no
  `tid`), complete
  events (`ph` "X") a non-negative `dur` (`converter_failed`, `not_chrome_trace`);
- its duration events (complete events, `ph` "X", and begin/end pairs, "B" then "E" on one thread) are the
  sample's: as many, named as they are (`trace_events_mismatch`); each sample
  thread's events are one Chrome thread's (`pid`, `tid`) and no other's (`thread_mismatch`);
  each event starts and lasts what the sample says, within a microsecond, the rounding a Chrome trace allows: all
  times scaled by one factor is a time unit converted wrongly (`time_unit_mismatch`), all moved by one offset a
  shifted clock (`clock_shifted`), otherwise the first event off is named (`event_time_mismatch`); in each
  thread an event inside another in the sample is inside it in the Chrome trace, and one that ends before the
  next starts still does (`nesting_mismatch`: rounding each start and end keeps this, rounding a duration on its
  own may not);
- its instant events (`ph` "i" or "I") are the sample's instants, each on its thread's Chrome thread at its
  time within a microsecond (`instant_mismatch`), and its counter events (`ph` "C") the sample's counters, each at
  its time with its value the one number of its `args` (`counter_mismatch`); dropped, added, mis-timed or
  changed, the first is named;
- it converts what it reads: run again on the sample varied at random for each check (one of its events left
  out, three added on the thread of one of its events after its last — an outer one holding two that meet —
  so that threads and nesting are compared even for a sample without nesting or with a thread for each event,
  one of its instants and one of its counters too where it has two or more, every event started between
  `SHIFT_US` and twice that later, each counter's value raised, and a clock in cycles multiplied by 2 to 4), its
  Chrome trace holds the varied sample's events by the same rules (a canned Chrome trace — even one for each run —
  a hard-coded clock or times made relative to the first event fail here; `converter_ignores_input` when it
  writes as many events as before).

JSON is read strictly: NaN, Infinity and a number past a double's range are refused (`not_json`), for a time
compared with NaN is never off.
"""

import copy
import json
import math
import random
import secrets
import shutil
import string
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from acceptance.inspection import Report
from acceptance.inspection.isolated import DEFAULT_LIMITS, run_isolated
from acceptance.inspection.schema import SchemaReport, schema_errors

SCHEMA = "schema.json"
SAMPLE = "sample.json"
FIELDS = "fields.json"
COMMAND = "convert.txt"
INPUT = "trace.in"
OUTPUT = "chrome-trace.json"
MAX_JSON_BYTES = 32 * 1024 * 1024
LIMITS = replace(DEFAULT_LIMITS, wall_seconds=120, memory_bytes=1024**3)
# Microseconds per unit of the sample's times; "cycle" is 1e6 / the sample's clock in Hz.
MICROSECONDS = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3, "ps": 1e-6, "cycle": None}
# A Chrome trace counts in microseconds: a converter may round each time to a whole one.
ROUNDING_US = 1.0
# Far more than the rounding: the varied sample starts at least this much later (at most twice).
SHIFT_US = 1000
CLOCK_FACTORS = (2, 3, 4)
# Each of the two events nested in the varied sample's added span lasts this much (at most twice): far more than
# the rounding, so the span nests whatever the clock factor.
NESTED_US = 100
# Float noise in comparisons of times the check computed itself.
EPSILON_US = 1e-6
# The optional kinds of fields.json: an instant (ph "i" or "I") has a name, thread and start; a counter (ph "C") a
# name, start and value.
MARKS = {"instants": ("i", "I"), "counters": ("C",)}


@dataclass(frozen=True)
class Event:
    name: str
    thread: str
    ts: float
    dur: float
    index: int  # its place in the sample or the Chrome trace

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class Mark:
    """An instant or a counter event: a name and time (and a counter's values; an instant's thread)."""

    name: str
    thread: str
    ts: float
    values: tuple[float, ...]
    index: int


@dataclass
class Converted:
    events: list[Event]
    marks: dict[str, list[Mark]]  # by kind: "instants", "counters"


def check_trace_delivery(bundle: Path, *, limits=LIMITS, seed: int | None = None) -> SchemaReport:
    """`seed` makes the varied sample (a random one when None, recorded in the report)."""
    report = SchemaReport()
    bundle = Path(bundle)
    missing = [name for name in (SCHEMA, SAMPLE, FIELDS, COMMAND) if not (bundle / name).is_file()]
    if missing:
        report.add("delivery_incomplete", f"the trace delivery has no {', '.join(missing)}", missing=missing)
        return report
    schema, sample, fields = (_json(bundle / name, report) for name in (SCHEMA, SAMPLE, FIELDS))
    command = (bundle / COMMAND).read_text(encoding="utf-8", errors="replace").strip()
    if schema is None or sample is None or fields is None:
        return report
    errors = schema_errors(schema, sample, SAMPLE, report)
    if errors is None:
        return report
    if errors:
        report.add("rejects_sample", f"the schema rejects its own sample: {errors[0]}", errors=errors)
    if not _fields_declared(fields, report):
        return report
    expected = _expected(sample, fields, report)
    report.checked.update(command=command, fields=fields)
    marks = _expected_marks(sample, fields, report)
    if expected is None or marks is None:
        return report
    report.checked["sample_events"] = len(expected)
    if not expected:
        report.add("sample_has_no_events", f"the sample's {fields['events']} holds no events")
        return report
    _check_schema_describes_events(schema, sample, fields, report)
    converted = _convert(bundle, command, sample, 1, report, limits)
    if converted is None:
        return report
    report.checked["converted_events"] = len(converted.events)
    _compare(expected, converted.events, report, "")
    _compare_marks(expected, marks, converted, report, "")
    if report.findings:
        return report
    seed = secrets.randbits(64) if seed is None else seed
    varied, how = _varied(sample, fields, random.Random(seed))
    report.checked["varied"] = {"seed": seed, "how": how}
    again = _convert(bundle, command, varied, 2, report, limits)
    if again is None:
        return report
    report.checked.update(varied_sample_events=len(expected) + 2, varied_events=len(again.events))
    if len(again.events) == len(converted.events):
        report.add(
            "converter_ignores_input",
            f"given the sample varied ({how}) the converter wrote {len(again.events)} events, not "
            f"{len(expected) + 2}: it does not convert what it reads",
        )
        return report
    expected_varied = _expected(varied, fields, report) or []
    run = f"on the sample varied ({how}): "
    _compare(expected_varied, again.events, report, run)
    _compare_marks(expected_varied, _expected_marks(varied, fields, report) or {}, again, report, run)
    if "first_mismatch" in report.checked:
        report.checked["first_mismatch"]["varied"] = True
    return report


def _check_schema_describes_events(schema: Any, sample: Any, fields: dict, report: SchemaReport) -> None:
    """The schema is the format's: it rejects the sample with its first event's start or duration missing, or its
    start not a number (a schema that accepts any object describes no field)."""
    for key, change, said in (
        ("start", _REMOVE, "without its start"),
        ("duration", _REMOVE, "without its duration"),
        ("start", "soon", "with its start the string 'soon'"),
    ):
        changed = copy.deepcopy(sample)
        _set(_at(changed, fields["events"])[0], fields[key], change)
        if schema_errors(schema, changed, f"the sample's event 0 {said}", report) == []:
            report.add(
                "schema_describes_no_event",
                f"the schema accepts the sample's event 0 {said} ({fields[key]}): it does not describe the events "
                f"{FIELDS} names",
                field=fields[key],
            )


_REMOVE = object()


def _set(node: Any, path: str, value: Any) -> None:
    """The field at the dotted `path` set to `value`, or removed with _REMOVE."""
    *parents, last = path.split(".")
    holder = _at(node, ".".join(parents)) if parents else node
    if isinstance(holder, dict) and value is _REMOVE:
        holder.pop(last, None)
    elif isinstance(holder, dict):
        holder[last] = value


def _fields_declared(fields: Any, report: Report) -> bool:
    if not isinstance(fields, dict):
        report.add("fields_undeclared", f"{FIELDS} is not an object")
        return False
    wanted = ["events", "name", "thread", "start", "duration", "unit"]
    if fields.get("unit") == "cycle":
        wanted.append("clock_hz")
    absent = [key for key in wanted if key not in fields]
    if absent:
        report.add("fields_undeclared", f"{FIELDS} does not say {', '.join(absent)}", missing=absent)
        return False
    if fields["unit"] not in MICROSECONDS:
        report.add("fields_undeclared", f"{FIELDS}'s unit {fields['unit']!r} is none of {', '.join(MICROSECONDS)}")
        return False
    if "counters" in fields and "value" not in fields:
        report.add("fields_undeclared", f"{FIELDS} names counters and does not say value", missing=["value"])
        return False
    threads = fields["thread"] if isinstance(fields["thread"], list) else [fields["thread"]]
    paths = [fields[key] for key in ("events", "name", "start", "duration")] + threads
    paths += [fields[key] for key in (*MARKS, "value") if key in fields]
    if fields["unit"] == "cycle":
        paths.append(fields["clock_hz"])
    if not all(isinstance(path, str) and path for path in paths):
        report.add("fields_undeclared", f"each field {FIELDS} names is a non-empty string (a dotted path)")
        return False
    return True


_ABSENT = object()


def _at(node: Any, path: str) -> Any:
    for key in path.split("."):
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _ABSENT
    return node


def _microseconds_per_unit(sample: Any, fields: dict) -> float | None:
    per_unit = MICROSECONDS[fields["unit"]]
    if per_unit is not None:
        return per_unit
    clock = _at(sample, fields["clock_hz"])
    if not _number(clock) or clock <= 0:
        return None
    return 1e6 / clock


def _expected(sample: Any, fields: dict, report: Report) -> list[Event] | None:
    """The Chrome events the sample must become, in microseconds; None when the sample lacks a field."""
    records = _at(sample, fields["events"])
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        report.add("fields_not_in_sample", f"the sample's {fields['events']} is not an array of events (objects)")
        return None
    per_unit = _microseconds_per_unit(sample, fields)
    if per_unit is None:
        report.add("fields_not_in_sample", f"the sample's clock {fields['clock_hz']} is not a positive number")
        return None
    threads = fields["thread"] if isinstance(fields["thread"], list) else [fields["thread"]]
    events = []
    for index, record in enumerate(records):
        name, start, duration = (_at(record, fields[key]) for key in ("name", "start", "duration"))
        thread = [_at(record, path) for path in threads]
        if not isinstance(name, str) or not _number(start) or not _number(duration) or _ABSENT in thread:
            report.add(
                "fields_not_in_sample",
                f"the sample's event {index} has no string {fields['name']}, numeric {fields['start']} and "
                f"{fields['duration']} or its thread {', '.join(threads)}",
                event=index,
            )
            return None
        events.append(Event(name, json.dumps(thread), start * per_unit, duration * per_unit, index))
    return events


def _expected_marks(sample: Any, fields: dict, report: Report) -> dict[str, list[Mark]] | None:
    """The instant and counter events the sample must become, by kind (only the kinds fields.json names); None
    when the sample lacks a field."""
    per_unit = _microseconds_per_unit(sample, fields)
    if per_unit is None:
        return None  # _expected said so
    threads = fields["thread"] if isinstance(fields["thread"], list) else [fields["thread"]]
    marks: dict[str, list[Mark]] = {}
    for kind in (kind for kind in MARKS if kind in fields):
        records = _at(sample, fields[kind])
        if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
            report.add("fields_not_in_sample", f"the sample's {fields[kind]} is not an array of {kind} (objects)")
            return None
        marks[kind] = []
        for index, record in enumerate(records):
            name, start = _at(record, fields["name"]), _at(record, fields["start"])
            if kind == "counters":
                value, thread = _at(record, fields["value"]), []
                wanted, ok = f"numeric {fields['value']}", _number(value)
            else:
                value, thread = 0, [_at(record, path) for path in threads]
                wanted, ok = f"its thread {', '.join(threads)}", _ABSENT not in thread
            if not isinstance(name, str) or not _number(start) or not ok:
                report.add(
                    "fields_not_in_sample",
                    f"the sample's {kind} {index} has no string {fields['name']}, numeric {fields['start']} "
                    f"or {wanted}",
                    event=index,
                )
                return None
            marks[kind].append(Mark(name, json.dumps(thread), start * per_unit, (value,), index))
    return marks


def _varied(sample: Any, fields: dict, rng: random.Random) -> tuple[Any, str]:
    """The sample varied with `rng`, and what was done: one event left out and a nested span of three added
    (`_nested_span`), one instant and one counter left out (of two or more), every event started later, each
    counter's value raised, a clock in cycles multiplied."""
    varied = copy.deepcopy(sample)
    per_unit = _microseconds_per_unit(sample, fields) or 1.0
    shift_us = rng.randint(SHIFT_US, 2 * SHIFT_US)
    shift = math.ceil(shift_us / per_unit)
    records = _at(varied, fields["events"])
    template = rng.randrange(len(records))
    added = _nested_span(records[template], records, fields, per_unit, rng)
    left_out = rng.randrange(len(records))
    del records[left_out]
    records.extend(added)
    names = ", ".join(_at(record, fields["name"]) for record in added)
    how = [f"its event {left_out} left out", f"{names} added nested on the thread of its event {template}"]
    marks = {kind: _at(varied, fields[kind]) for kind in MARKS if kind in fields}
    for kind, held in marks.items():
        if len(held) >= 2:
            dropped = rng.randrange(len(held))
            del held[dropped]
            how.append(f"its {kind.removesuffix('s')} {dropped} left out")
    for record in records + [mark for held in marks.values() for mark in held]:
        _change(record, fields["start"], lambda start: start + shift)
    how.append(f"every event started {shift_us} µs later")
    if "counters" in marks:
        raise_by = rng.randint(1, 1000)
        for counter in marks["counters"]:
            _change(counter, fields["value"], lambda value: value + raise_by)
        how.append(f"each counter's value {raise_by} more")
    if fields["unit"] == "cycle":
        factor = rng.choice(CLOCK_FACTORS)
        _change(varied, fields["clock_hz"], lambda clock: clock * factor)
        how.append(f"its clock {factor} times faster")
    return varied, ", ".join(how)


def _nested_span(template: Any, records: list, fields: dict, per_unit: float, rng: random.Random) -> list:
    """Three events on `template`'s thread after every event of `records`: an outer one, and inside it two that
    meet (the first ends as the second starts), the first starting with it and the second ending with it; so
    the comparisons of threads and of nesting run whatever the sample holds."""
    taken = {_at(record, fields["name"]) for record in records}
    half = math.ceil(rng.randint(NESTED_US, 2 * NESTED_US) / 2 / per_unit)
    start = max(_at(record, fields["start"]) + _at(record, fields["duration"]) for record in records) + 2 * half
    added = []
    for offset, length in ((0, 2 * half), (0, half), (half, half)):
        record = copy.deepcopy(template)
        name = _fresh_name(rng, taken)
        _change(record, fields["name"], lambda _, name=name: name)
        _change(record, fields["start"], lambda _, at=start + offset: at)
        _change(record, fields["duration"], lambda _, length=length: length)
        added.append(record)
    return added


def _fresh_name(rng: random.Random, taken: set[str]) -> str:
    while (name := "".join(rng.choices(string.ascii_lowercase, k=8))) in taken:
        pass
    taken.add(name)
    return name


def _change(node: Any, path: str, how) -> None:
    *parents, last = path.split(".")
    holder = _at(node, ".".join(parents)) if parents else node
    key = int(last) if isinstance(holder, list) else last
    holder[key] = how(holder[key])


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a double's range")
    return value


def _json(path: Path, report: Report) -> Any:
    if path.stat().st_size > MAX_JSON_BYTES:
        report.add("file_too_large", f"{path.name} is larger than {MAX_JSON_BYTES} bytes", file=path.name)
        return None
    try:
        return json.loads(path.read_bytes(), parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, UnicodeDecodeError) as error:
        report.add("not_json", f"{path.name} is not JSON: {error}", file=path.name)
        return None


def _convert(bundle: Path, command: str, sample: Any, number: int, report: Report, limits) -> Converted | None:
    """The converter run on `sample` in a fresh copy of the delivery; its Chrome trace's duration, instant and
    counter events, or None when it failed or wrote no Chrome trace."""
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


def _chrome_events(document: Any, report: Report) -> Converted | None:
    """The Chrome trace's duration events: complete events (X), and begin/end pairs (B, E) as one; each thread
    named by its pid and tid. And its instants (i, I) and counters (C, their numeric args)."""
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
    timed, spans = [], []
    marks: dict[str, list[Mark]] = {kind: [] for kind in MARKS}
    for index, event in enumerate(events):
        wrong = _chrome_event_error(event)
        if wrong:
            report.add("not_chrome_trace", f"{OUTPUT} event {index}: {wrong}", event=index)
            return None
        thread = json.dumps([event["pid"], event.get("tid")])
        if event["ph"] == "X":
            timed.append(Event(event["name"], thread, event["ts"], event["dur"], index))
        elif event["ph"] in ("B", "E"):
            spans.append((thread, event["ts"], index, event))
        for kind, phases in MARKS.items():
            if event["ph"] in phases:
                args = event.get("args") if isinstance(event.get("args"), dict) else {}
                values = tuple(value for value in args.values() if _number(value))
                marks[kind].append(Mark(event["name"], thread, event["ts"], values, index))
    paired = _begin_end_paired(spans, report)
    return None if paired is None else Converted(timed + paired, marks)


def _begin_end_paired(spans: list[tuple[str, float, int, dict]], report: Report) -> list[Event] | None:
    """Duration events: per thread in time order (file order at equal times), each end (E) closes the latest
    begin (B) still open."""
    paired: list[Event] = []
    open_: dict[str, list[Event]] = defaultdict(list)
    for thread, ts, index, event in sorted(spans, key=lambda span: span[:3]):
        if event["ph"] == "B":
            open_[thread].append(Event(event["name"], thread, ts, 0.0, index))
        elif open_[thread]:
            begun = open_[thread].pop()
            paired.append(replace(begun, dur=ts - begun.ts))
        else:
            report.add("not_chrome_trace", f"{OUTPUT} event {index}: an end (E) with no begin (B) open", event=index)
            return None
    unclosed = [event for events in open_.values() for event in events]
    if unclosed:
        report.add(
            "not_chrome_trace", f"{OUTPUT} event {unclosed[0].index}: a begin (B) never ended", event=unclosed[0].index
        )
        return None
    return paired


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _chrome_event_error(event: Any) -> str:
    if not isinstance(event, dict):
        return "not an object"
    if not isinstance(event.get("ph"), str) or not event["ph"]:
        return "no ph"
    if event["ph"] != "E" and (not isinstance(event.get("name"), str) or not event["name"]):
        return "no name"  # an end event (E) takes its begin's
    for key in ("pid", "tid") if event["ph"] != "C" else ("pid",):  # a counter is its process's
        if not _number(event.get(key)):
            return f"{key} is not a number"
    if event["ph"] != "M" and not _number(event.get("ts")):
        return "ts is not a number"
    if event["ph"] == "X" and not (_number(event.get("dur")) and event["dur"] >= 0):
        return "a complete event (X) without a non-negative dur"
    return ""


def _compare(expected: list[Event], converted: list[Event], report: Report, run: str) -> None:
    """`converted` is `expected`: the same events, each sample thread's on one Chrome thread, the same times
    within ROUNDING_US, the same order and nesting; the first difference found is the finding."""
    if len(converted) != len(expected):
        report.add(
            "trace_events_mismatch",
            f"{run}the sample has {len(expected)} events, the converter's Chrome trace {len(converted)} duration "
            "events (X, or B and E)",
            expected=len(expected),
            actual=len(converted),
        )
        return
    unknown = sorted((Counter(e.name for e in converted) - Counter(e.name for e in expected)).keys())
    if unknown:
        report.checked["first_mismatch"] = {"names": unknown[:5]}
        report.add(
            "trace_events_mismatch",
            f"{run}the converter's Chrome trace names events the sample does not: {', '.join(unknown[:5])}",
            names=unknown[:5],
        )
        return
    pairs = _threads_paired(expected, converted, report, run)
    if pairs is None:
        return
    _times(pairs, report, run)
    if not report.findings:
        _nesting(pairs, report, run)


def _threads_paired(expected: list[Event], converted: list[Event], report: Report, run: str):
    """Per sample thread, its events paired with those of the Chrome thread that holds the same events (the
    k-th of a name in start order with the k-th); None, with the finding, when no Chrome thread does."""
    chrome = _by_thread(converted)
    pairs: list[list[tuple[Event, Event]]] = []
    for thread, events in _by_thread(expected).items():
        names = Counter(e.name for e in events)
        match = next((key for key, held in chrome.items() if Counter(e.name for e in held) == names), None)
        if match is None:
            listed = ", ".join(e.name for e in events[:5])
            report.add(
                "thread_mismatch",
                f"{run}no thread of the converter's Chrome trace holds the events of the sample's thread {thread} "
                f"and no other: {listed}",
                thread=thread,
            )
            report.checked["first_mismatch"] = {"thread": thread, "expected": [e.name for e in events[:5]]}
            return None
        held: dict[str, list[Event]] = defaultdict(list)
        for event in chrome.pop(match):
            held[event.name].append(event)
        taken: Counter = Counter()
        paired = []
        for event in events:
            paired.append((event, held[event.name][taken[event.name]]))
            taken[event.name] += 1
        pairs.append(paired)
    return pairs


def _by_thread(events: list[Event]) -> dict[str, list[Event]]:
    threads: dict[str, list[Event]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.ts, -e.dur, e.name, e.index)):
        threads[event.thread].append(event)
    return threads


def _off(e: Event, a: Event, *, scale: float = 1.0, shift: float = 0.0) -> bool:
    tolerance = ROUNDING_US * max(1.0, scale) + EPSILON_US
    return abs(a.ts - (e.ts * scale + shift)) > tolerance or abs(a.dur - e.dur * scale) > tolerance


def _times(threads: list[list[tuple[Event, Event]]], report: Report, run: str) -> None:
    pairs = [pair for thread in threads for pair in thread]
    wrong = [(e, a) for e, a in pairs if _off(e, a)]
    if not wrong:
        return
    e, a = wrong[0]
    report.checked["first_mismatch"] = {
        "event": e.name,
        "thread": e.thread,
        "expected": {"ts": round(e.ts, 3), "dur": round(e.dur, 3)},
        "actual": {"ts": a.ts, "dur": a.dur},
    }
    said = (
        f"{e.name} (the sample's event {e.index}, thread {e.thread}) starts at {a.ts:g} µs and lasts {a.dur:g} µs in "
        f"the converter's Chrome trace; the sample says {e.ts:g} µs and {e.dur:g} µs"
    )
    latest = max(pairs, key=lambda pair: pair[0].end)
    scale = latest[1].end / latest[0].end if latest[0].end > 0 else 1.0
    if abs(scale - 1.0) > 1e-3 and not any(_off(e, a, scale=scale) for e, a in pairs):
        report.add(
            "time_unit_mismatch",
            f"{run}every time in the converter's Chrome trace is {scale:g} times the sample's: it does not convert "
            f"the sample's unit to microseconds ({said})",
            scale=scale,
        )
        return
    shift = a.ts - e.ts
    if not any(_off(e, a, shift=shift) for e, a in pairs):
        report.add(
            "clock_shifted",
            f"{run}every event of the converter's Chrome trace starts {shift:g} µs off the sample's time ({said})",
            shift=shift,
        )
        return
    report.add("event_time_mismatch", f"{run}{said}", event=e.index)


def _nesting(threads: list[list[tuple[Event, Event]]], report: Report, run: str) -> None:
    """Per thread, an event inside another in the sample is inside it in the Chrome trace, and an event that
    ends before the next one starts still does."""
    for pairs in threads:
        enclosing: list[tuple[Event, Event]] = []
        for number, (e, a) in enumerate(pairs):
            if number:
                before, after = pairs[number - 1]
                if before.end <= e.ts + EPSILON_US and after.end > a.ts + EPSILON_US:
                    _nested_wrongly(report, run, e, before.name, "follows")
                    return
            while enclosing and not _inside(e, enclosing[-1][0]):
                enclosing.pop()
            if enclosing and not _inside(a, enclosing[-1][1]):
                _nested_wrongly(report, run, e, enclosing[-1][0].name, "inside")
                return
            enclosing.append((e, a))


def _inside(event: Event, outer: Event) -> bool:
    return outer.ts <= event.ts + EPSILON_US and event.end <= outer.end + EPSILON_US


def _nested_wrongly(report: Report, run: str, e: Event, other: str, relation: str) -> None:
    report.checked["first_mismatch"] = {"event": e.name, "thread": e.thread, "other": other, "relation": relation}
    said = f"{other} ends before {e.name} starts" if relation == "follows" else f"{e.name} is inside {other}"
    report.add(
        "nesting_mismatch", f"{run}{said} in the sample, not in the converter's Chrome trace (thread {e.thread})"
    )


def _compare_marks(
    events: list[Event], marks: dict[str, list[Mark]], converted: Converted, report: Report, run: str
) -> None:
    """Each instant of the sample on its thread's Chrome thread at its time, each counter at its time with its
    value; the first one dropped, added, off or changed is the finding. Only after the duration events matched:
    they say which Chrome thread is which sample thread's."""
    if report.findings or not marks:
        return
    paired = _threads_paired(events, converted.events, report, run) or []
    threads = {e.thread: a.thread for pairs in paired for e, a in pairs}
    # A sample thread with instants alone: the Chrome thread, of no other sample thread, holding the same instants.
    written_names = _names_by_thread(converted.marks["instants"])
    for thread, held in _names_by_thread(marks.get("instants", [])).items():
        if thread not in threads:
            free = [key for key, had in written_names.items() if had == held and key not in threads.values()]
            threads[thread] = free[0] if free else ""
    for kind, expected in marks.items():
        code = "instant_mismatch" if kind == "instants" else "counter_mismatch"
        written = converted.marks[kind]
        if len(written) != len(expected):
            phases = " or ".join(MARKS[kind])
            report.add(
                code,
                f"{run}the sample has {len(expected)} {kind}, the converter's Chrome trace {len(written)} "
                f"(ph {phases})",
                expected=len(expected),
                actual=len(written),
            )
            return
        by_key: dict[tuple[str, str], list[Mark]] = defaultdict(list)
        for mark in sorted(written, key=lambda m: (m.ts, m.index)):
            by_key[(mark.name, mark.thread if kind == "instants" else "")].append(mark)
        taken: Counter = Counter()
        for mark in sorted(expected, key=lambda m: (m.ts, m.index)):
            key = (mark.name, threads.get(mark.thread, "") if kind == "instants" else "")
            found = by_key[key][taken[key]] if taken[key] < len(by_key[key]) else None
            taken[key] += 1
            wrong = _mark_wrong(kind, mark, found)
            if wrong:
                report.checked["first_mismatch"] = {
                    "mark": kind,
                    "event": mark.name,
                    "thread": mark.thread,
                    "expected": {"ts": round(mark.ts, 3), "value": mark.values[0]},
                    "actual": None if found is None else {"ts": found.ts, "values": list(found.values)},
                }
                report.add(code, f"{run}{wrong}", event=mark.index)
                return


def _names_by_thread(marks: list[Mark]) -> dict[str, Counter]:
    threads: dict[str, Counter] = defaultdict(Counter)
    for mark in marks:
        threads[mark.thread][mark.name] += 1
    return threads


def _mark_wrong(kind: str, mark: Mark, found: Mark | None) -> str:
    if kind == "instants":
        said = f"the sample's instant {mark.name} ({kind} {mark.index}, thread {mark.thread}) at {mark.ts:g} µs"
        if found is None:
            return f"{said} is no instant event (ph i or I) on that thread's Chrome thread"
        if abs(found.ts - mark.ts) > ROUNDING_US + EPSILON_US:
            return f"{said} is at {found.ts:g} µs in the converter's Chrome trace"
        return ""
    said = f"the sample's counter {mark.name} ({kind} {mark.index}) at {mark.ts:g} µs, value {mark.values[0]:g},"
    if found is None:
        return f"{said} is no counter event (ph C) in the converter's Chrome trace"
    if abs(found.ts - mark.ts) > ROUNDING_US + EPSILON_US:
        return f"{said} is at {found.ts:g} µs in the converter's Chrome trace"
    # One series a counter: a value among several in its args would let every value of the sample stand in each.
    if len(found.values) != 1 or not math.isclose(found.values[0], mark.values[0], rel_tol=1e-9, abs_tol=1e-12):
        values = ", ".join(f"{value:g}" for value in found.values) or "none"
        return f"{said} has args values {values} in the converter's Chrome trace"
    return ""
