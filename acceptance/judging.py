"""calculet's own verdict on what a runner measured. No ORM here, nothing of Django.

A runner measures; calculet judges. At the runner, golden, failure, integration and soak stages the runner
must leave what it measured in the files the protocol names (docs/runner-protocol.md, "A runner measures;
calculet judges"): logits as BF16 bit patterns, each fault's code, each request's timings. calculet reads
them with the golden the job named and the job's parameters and computes the verdict with its own code
(`npu_sim.golden.compare` and the package's reference, which the runner never supplies): the rates,
percentiles and counts of the soak, the codes and recoveries of the failure stage, the replays of the
runner and integration stages. The runner's `verdict`, checks and metrics do not decide: a result that says
pass where its files do not is a failure naming the mismatch, and a result without its files proves nothing.

A package feature is judged by what it computes (`probe_judgements`): an S8 package's measured logits against
calculet's own float model (`FLOAT_MODEL`), never against the package's own dequantised integers, so weights
that lost the model fail however well they match their own golden; a sampling package's draws (the runner's
`sampling-draws.npz`) against the host reference sampler on the device's measured logits, with the recipe's
parameters, and token for token against what the sampling op draws for the job's seed, so a package that
declares sampling and returns the argmax, samples with another temperature or top-p, or draws from another
generator, fails.
"""

import json
import math
import re
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from acceptance.limits import GOLDEN_TENSORS, MIN_GOLDEN_DECODE_STEPS
from npu_sim.calbin.findings import CalbinError
from npu_sim.calbin.goldens import GoldenError, GoldenSet, read_golden
from npu_sim.calbin.layout import GOLDEN, VENDOR_FORM
from npu_sim.calbin.metadata import read_meta
from npu_sim.calbin.package import open_package
from npu_sim.dtypes import bits_to_float32, to_bf16
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.faults import EXPECTED_CODES
from npu_sim.golden import Tolerance, as_float32, compare, row_figures
from npu_sim.loaded_calbin import Calbin, load_calbin
from npu_sim.model import PRESETS, ReferenceModel, init_weights
from npu_sim.model.reference import teacher_forced_rows
from npu_sim.probes import PROBES
from npu_sim.sampling import (
    SamplingParams,
    chi_square_test,
    counter_uniforms,
    device_sample,
    reference_probabilities,
)
from npu_sim.stages.common import percentiles
from npu_sim.stages.integration import PARAMS as INTEGRATION_PARAMS
from npu_sim.stages.integration import prompts_for

MEASURED_LOGITS = "golden-actual.npz"
MEASURED_UNDER_LOAD = "soak-golden-actual.npz"
MEASURED_REQUESTS = "soak-requests.jsonl"
MEASURED_SCENARIOS = "failure-scenarios.jsonl"
MEASURED_FAILURE_LOGITS = "failure-actual.npz"
MEASURED_RUN = "runner-actual.npz"
MEASURED_SEQUENCES = "integration-sequences.jsonl"
MEASURED_SEQUENCE_LOGITS = "integration-actual.npz"
MEASURED_DRAWS = "sampling-draws.npz"
REQUEST_FIELDS = (
    "request (integer), sent_ms (number), token_ms (numbers, not decreasing), error (string or null), "
    "golden_sample (boolean)"
)
SCENARIO_FIELDS = "scenario, fault, at_step, produced_code, recovery, after_code (integers but fault and recovery)"
SEQUENCE_FIELDS = "sequence (integer), prompt and tokens (integer ids), error (string or null)"
# The failure and runner stages' decode steps when the job gives none (docs/runner-protocol.md).
FAILURE_DECODE_STEPS = 4
RUNNER_DECODE_STEPS = 4
CORRUPTED_OUTPUT = "corrupted_output"


@dataclass
class Judgement:
    passed: bool
    reason: str
    findings: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # what calculet computed, in place of the runner's


def gettext_noop(template: str) -> str:
    """Marks an English template for the catalogue (read by xgettext as Django's is); judging imports no Django."""
    return template


NOTHING_MEASURED = gettext_noop("the runner wrote no %(file)s: nothing measured to judge")
# The lead finding of a judgement that fails where the runner's result says pass (`coded_verdict`).
CLAIM_UNSUPPORTED = gettext_noop("the runner claims a pass its measurements do not support — %(detail)s")
# A sampling judgement's findings, and its reason, which says all of them after one "sampling: ".
SAMPLING = gettext_noop("sampling: %(problem)s")
# The field of the runner stage's finding that its minimal example failed, said after the judgement's reason
# (services/runs/running.py).
MINIMAL_EXAMPLE_FIELD = "minimal_example"
# Why calculet-agent leaves the answer's minimal example unrun (services/agents.py): the runner stage's whole
# reason when the runner said nothing, otherwise said after it.
EXAMPLE_NOT_RUN = gettext_noop(
    "calculet-agent runs only the operator's runner on the target's host, never the vendor's example"
)
EXAMPLE_NOT_RUN_AFTER = gettext_noop("%(reason)s; the minimal example was not run (%(why)s)")
# Two sentences said one after the other: "; " between them in every language.
THEN = gettext_noop("%(first)s; %(then)s")


class Said(str):
    """One of calculet's judging sentences: the English sentence, as every record and the API give it, which
    keeps its template and parameters so a page can say it in the reader's language (`calculet.sentences`).
    A parameter may be a list (joined ", " in English, as the reader's language lists on a page) or another
    `Said`."""

    template: str
    params: dict

    def __new__(cls, template: str, **params: Any) -> "Said":
        said = super().__new__(cls, template % {name: _english(value) for name, value in params.items()})
        said.template = template
        said.params = {name: _stored(value) for name, value in params.items()}
        return said

    def stored(self) -> dict:
        return {"template": self.template, "params": self.params}


def _english(value: Any) -> Any:
    return ", ".join(str(item) for item in value) if isinstance(value, list) else value


def _stored(value: Any) -> Any:
    """A parameter as a run's JSON keeps it: a `Said` as its template and parameters, a NumPy number as Python's."""
    if isinstance(value, Said):
        return value.stored()
    return value.item() if isinstance(value, np.generic) else value


def together(said: list[str]) -> str:
    """Sentences said one after the other, "; " between them: a `Said` of each pair, so every one keeps its own
    template."""
    joined = said[-1]
    for first in reversed(said[:-1]):
        joined = Said(THEN, first=first, then=joined)
    return joined


def finding(code: str, message: str, field_name: str = "measurements") -> dict:
    """A finding as a run stores it; a `Said` message keeps its template and parameters beside the sentence."""
    found = {"code": code, "severity": "error", "field": field_name, "message": str(message)}
    if isinstance(message, Said):
        found |= message.stored()
    return found


def said_by(error: Exception) -> str:
    """What a ValueError raised with a `Said` says, still a `Said` (str(error) would lose its template)."""
    return error.args[0] if error.args and isinstance(error.args[0], Said) else str(error)


def _measured_logits(path: Path, ndim: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """The device's logits the runner wrote; ValueError naming what is wrong with the file."""
    arrays = read_npz(path)
    missing = [name for name in GOLDEN_TENSORS if name not in arrays]
    if missing:
        raise ValueError(Said(gettext_noop("%(file)s holds no %(tensors)s"), file=path.name, tensors=missing))
    ndim = ndim or {"prefill_logits": 2, "decode_logits": 2}
    for name in GOLDEN_TENSORS:
        if arrays[name].dtype != np.uint16 or arrays[name].ndim != ndim[name]:
            raise ValueError(
                Said(
                    gettext_noop("%(file)s: %(tensor)s must be BF16 bit patterns (uint16) with %(ndim)s dimensions"),
                    file=path.name,
                    tensor=name,
                    ndim=ndim[name],
                )
            )
    return arrays


def reference_golden(golden_source: str, golden_path: Path | None, calbin_path: Path) -> GoldenSet:
    """The golden the job named, read by calculet: the vendor's file, or the package's own golden."""
    if golden_source != "package" and golden_path is None:
        raise ValueError(Said(gettext_noop("the job names no golden to judge against")))
    try:
        if golden_source == "package":
            with open_package(calbin_path) as package:
                golden = read_golden(package.read(GOLDEN), "package")
        else:
            assert golden_path is not None
            golden = read_golden(golden_path.read_bytes(), str(golden_path))
    except (OSError, KeyError, GoldenError, CalbinError) as error:
        raise ValueError(Said(gettext_noop("the golden cannot be read: %(error)s"), error=str(error))) from error
    if golden.decode_steps < 1:
        raise ValueError(
            Said(gettext_noop("the golden (%(source)s) has no decode step to judge against"), source=golden.source)
        )
    return golden


def golden_length_failure(golden: GoldenSet, params: dict) -> str:
    """Why `golden` is too short to judge by ("" when it is not): fewer decode steps than calculet's minimum or
    the job's `min_decode_steps` (the answer's, which only raises it)."""
    minimum = max(MIN_GOLDEN_DECODE_STEPS, params.get("min_decode_steps") or 0)
    if golden.decode_steps >= minimum:
        return ""
    return Said(
        gettext_noop("the golden (%(source)s) holds %(steps)s decode steps; calculet judges by at least %(minimum)s"),
        source=golden.source,
        steps=golden.decode_steps,
        minimum=minimum,
    )


# The stages calculet judges from the runner's measurement files (docs/runner-protocol.md).
JUDGED_STAGES = ("runner", "golden", "failure", "integration", "soak")
# The files each judged stage's runner measures into, which calculet reads (calculet-agent sends them back).
MEASURED_FILES = {
    "runner": (MEASURED_RUN,),
    "golden": (MEASURED_LOGITS, MEASURED_DRAWS),
    "failure": (MEASURED_SCENARIOS, MEASURED_FAILURE_LOGITS),
    "integration": (MEASURED_SEQUENCES, MEASURED_SEQUENCE_LOGITS),
    "soak": (MEASURED_UNDER_LOAD, MEASURED_REQUESTS),
}


def stage_judgement(
    stage: str,
    result: dict,
    workdir: Path,
    params: dict,
    probes: list[dict],
    calbin: Path,
    golden_source: str,
    golden: Path | None,
) -> Judgement:
    """calculet's verdict on one of `JUDGED_STAGES` from the files the runner left in `workdir`, with the
    job's `params` and `probes`; `calbin`, `golden_source` and `golden` are the job's package and golden. At
    the golden stage each feature the probes claim is judged by what the package computed too."""
    if stage == "runner":
        return runner_judgement(result, workdir, calbin, params, golden_source, golden)
    if stage == "integration":
        return integration_judgement(result, workdir, calbin, params)
    reference = None
    if stage != "soak" or params.get("golden_samples"):
        try:
            reference = reference_golden(golden_source, golden, calbin)
        except ValueError as error:
            return Judgement(False, str(error), [finding("no_reference", said_by(error))])
        too_short = golden_length_failure(reference, params)
        if too_short:
            return coded_verdict(result, {}, [("golden_too_short", too_short)], "")
    if stage == "soak":
        return soak_judgement(result, workdir, reference, params)
    assert reference is not None
    if stage == "failure":
        return failure_judgement(result, workdir, reference, params)
    judged = golden_judgement(result, workdir, reference, params.get("tolerances", {}))
    return _with_features(judged, probe_judgements(probes, workdir, calbin, reference))


def _with_features(judged: Judgement, features: dict[str, Judgement]) -> Judgement:
    """The golden stage's judgement with its features' (by metrics key): it passes when every one passes."""
    failed = [j for j in (judged, *features.values()) if not j.passed]
    metrics = {**judged.metrics, **{name: feature.metrics for name, feature in features.items()}}
    if not failed:
        return Judgement(True, judged.reason, [], metrics)
    findings = [item for j in failed for item in j.findings]
    return Judgement(False, "; ".join(j.reason for j in failed), findings, metrics)


def golden_judgement(result: dict, workdir: Path, golden: GoldenSet, tolerances: dict[str, dict]) -> Judgement:
    """calculet's verdict on a golden stage from the logits the runner measured, against `golden` with the
    job's per-tensor `tolerances`. Every decode step of the golden must have been measured."""
    try:
        measured = _measured_logits(workdir / MEASURED_LOGITS)
    except ValueError as error:
        return coded_verdict(result, {}, [("no_measurement", said_by(error))], "")
    reports, failures = _compared(measured, _golden_tensors(golden), tolerances)
    return _verdict(result, {"tensors": reports}, failures, "the measured logits are within tolerance of the golden")


def soak_judgement(result: dict, workdir: Path, golden: GoldenSet | None, params: dict) -> Judgement:
    """calculet's verdict on the soak from what the runner measured: the load (`soak_load`) and, when the job
    asks for golden samples, the golden under load against `golden` (the job's; `stage_judgement` reads it
    whenever the job asks for samples)."""
    failures: list[tuple[str, str]] = []
    metrics: dict = {}
    try:
        records = _jsonl(workdir / MEASURED_REQUESTS, _is_request_record, REQUEST_FIELDS)
    except ValueError as error:
        return coded_verdict(result, {}, [("no_measurement", said_by(error))], "")
    if not records:
        message = Said(gettext_noop("%(file)s lists no request: nothing measured to judge"), file=MEASURED_REQUESTS)
        return coded_verdict(result, {}, [("no_measurement", message)], "")
    figures, load_failures = soak_load(records, params, golden)
    metrics |= figures
    failures += load_failures
    samples = params.get("golden_samples") or 0
    if samples and golden is not None:
        reports, golden_failures, sampled = _golden_under_load(workdir, golden, params.get("tolerances", {}), samples)
        metrics["golden_under_load"] = reports
        failures += golden_failures
        marked = sorted(record["request"] for record in records if record["golden_sample"])
        # The sampled responses must be requests the load served, each of them once.
        if sampled != marked:
            message = Said(
                gettext_noop("%(file)s holds requests %(sampled)s; %(requests_file)s marks %(marked)s sampled"),
                file=MEASURED_UNDER_LOAD,
                sampled=str(sampled),
                requests_file=MEASURED_REQUESTS,
                marked=str(marked),
            )
            failures.append(("golden_mismatch", message))
    passed = f"{figures['completed']} requests over {figures['duration_ms'] / 1000:.3f} s of device time"
    if samples:
        passed += f"; {samples} sampled responses under load match the golden"
    return coded_verdict(result, metrics, failures, passed)


def soak_load(records: list[dict], params: dict, golden: GoldenSet | None) -> tuple[dict, list[tuple[str, str]]]:
    """The soak's rates and counts computed from its requests' timings, against the job's limits: at least
    `requests` requests, none failed or cut short, for at least `min_duration_s` of device time, with a median
    per-request decode rate of at least `min_decode_tokens_per_s`, and `concurrency` requests in flight at
    once. Returns the figures (the runner's metric names) and the broken limits as (finding code, message)."""
    failures: list[tuple[str, str]] = []
    ids = [record["request"] for record in records]
    if len(set(ids)) != len(ids):
        message = Said(gettext_noop("%(file)s lists a request more than once"), file=MEASURED_REQUESTS)
        failures.append(("duplicate_requests", message))
    required = params.get("requests") or 0
    if len(set(ids)) < required:
        message = Said(
            gettext_noop("%(measured)s requests measured; the soak must serve %(required)s"),
            measured=len(set(ids)),
            required=required,
        )
        failures.append(("too_few_requests", message))
    marked = sum(1 for record in records if record["golden_sample"])
    samples = params.get("golden_samples") or 0
    if marked != samples:
        # A request marked a golden sample is held to the golden's length, not `output_tokens`.
        message = Said(
            gettext_noop("%(marked)s requests are marked golden samples; the soak samples %(samples)s"),
            marked=marked,
            samples=samples,
        )
        failures.append(("golden_samples_mismatch", message))
    errors: Counter[str] = Counter()
    completed = []
    for record in records:
        asked = golden.decode_steps + 1 if record["golden_sample"] and golden else params.get("output_tokens")
        if record["error"] is not None:
            errors[record["error"]] += 1
        elif asked is not None and len(record["token_ms"]) != asked:
            errors["incomplete"] += 1
        else:
            completed.append(record)
    if errors:
        message = Said(
            gettext_noop("%(failed)s requests failed under load: %(errors)s"),
            failed=sum(errors.values()),
            errors=str(dict(errors)),
        )
        failures.append(("errors_under_load", message))
    rates = [
        (len(r["token_ms"]) - 1) * 1000.0 / (r["token_ms"][-1] - r["token_ms"][0])
        for r in completed
        if len(r["token_ms"]) > 1 and r["token_ms"][-1] > r["token_ms"][0]
    ]
    ends = [r["token_ms"][-1] for r in records if r["token_ms"]]
    duration_ms = max(ends) - min(r["sent_ms"] for r in records) if ends else 0.0
    figures: dict[str, Any] = {
        "requests": len(records),
        "completed": len(completed),
        "error_count": len(records) - len(completed),
        "errors": dict(errors),
        "duration_ms": round(duration_ms, 3),
        "ttft_ms": percentiles([r["token_ms"][0] - r["sent_ms"] for r in completed if r["token_ms"]]),
        "inter_token_ms": percentiles([b - a for r in completed for a, b in pairwise(r["token_ms"])]),
        "decode_tokens_per_s": percentiles(rates),
        "request_latency_ms": percentiles([r["token_ms"][-1] - r["sent_ms"] for r in completed if r["token_ms"]]),
    }
    concurrency = min(params.get("concurrency") or 1, len(records))
    if _peak_in_flight(records) < concurrency:
        message = Said(
            gettext_noop("at most %(peak)s requests were in flight at once; the soak holds %(concurrency)s"),
            peak=_peak_in_flight(records),
            concurrency=concurrency,
        )
        failures.append(("load_not_held", message))
    min_duration = params.get("min_duration_s")
    if min_duration is not None and duration_ms / 1000.0 < min_duration:
        failures.append(
            (
                "too_short",
                Said(
                    gettext_noop("the load held for %(held).3f s of device time; the soak must hold %(minimum)s s"),
                    held=duration_ms / 1000,
                    minimum=min_duration,
                ),
            )
        )
    min_rate = params.get("min_decode_tokens_per_s")
    p50 = figures["decode_tokens_per_s"]["p50"]
    if min_rate is not None and (p50 is None or p50 < min_rate):
        failures.append(
            (
                "rate_below_threshold",
                Said(
                    gettext_noop(
                        "the median per-request decode rate is %(rate)s token/s; the soak requires %(minimum)s"
                    ),
                    rate=p50,
                    minimum=min_rate,
                ),
            )
        )
    return figures, failures


def _peak_in_flight(records: list[dict]) -> int:
    """The most requests sent and not yet answered at one time (a request ends with its last token; one that
    ends as the next is sent is not counted twice)."""
    events = sorted(
        [(r["sent_ms"], 1) for r in records]
        + [(r["token_ms"][-1] if r["token_ms"] else r["sent_ms"], -1) for r in records]
    )
    peak = in_flight = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    return peak


def _golden_under_load(
    workdir: Path, golden: GoldenSet, tolerances: dict[str, dict], samples: int
) -> tuple[dict, list[tuple[str, str]], list[int]]:
    """At least `samples` of the soak's responses to the golden's request, as the runner measured them while
    serving the others, each within tolerance of the golden. Returns the reports, the failures and the
    sampled requests' ids."""
    path = workdir / MEASURED_UNDER_LOAD
    try:
        measured = _measured_logits(path, {"prefill_logits": 2, "decode_logits": 3})
        with np.load(path, allow_pickle=False) as npz:
            if "request_ids" not in npz.files:
                raise ValueError(
                    Said(
                        gettext_noop("%(file)s names no request_ids: which requests of the load they were"),
                        file=path.name,
                    )
                )
            request_ids = sorted(int(i) for i in npz["request_ids"])
    except ValueError as error:
        return {}, [("no_measurement", said_by(error))], []
    count = len(measured["prefill_logits"])
    if count < samples or len(measured["decode_logits"]) != count or len(request_ids) != count:
        message = Said(
            gettext_noop("%(file)s holds %(count)s sampled responses; the soak must check %(samples)s"),
            file=MEASURED_UNDER_LOAD,
            count=count,
            samples=samples,
        )
        return {}, [("too_few_samples", message)], request_ids
    reports: dict = {}
    failures: list[tuple[str, str]] = []
    for index in range(count):
        sample = {name: measured[name][index].reshape(-1, measured[name].shape[-1]) for name in GOLDEN_TENSORS}
        sample_reports, sample_failures = _compared(sample, _golden_tensors(golden), tolerances, index + 1)
        reports |= {f"response_{index + 1}.{name}": report for name, report in sample_reports.items()}
        failures += [("golden_mismatch", failure) for failure in sample_failures]
    return reports, failures, request_ids


def _is_request_record(record: dict) -> bool:
    times = record.get("token_ms")
    return (
        _is_int(record.get("request"))
        and _is_number(record.get("sent_ms"))
        and isinstance(times, list)
        and all(_is_number(t) for t in times)
        and all(b >= a for a, b in pairwise([record["sent_ms"], *times]))
        and (record.get("error") is None or isinstance(record.get("error"), str))
        and isinstance(record.get("golden_sample"), bool)
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def failure_judgement(result: dict, workdir: Path, golden: GoldenSet, params: dict) -> Judgement:
    """calculet's verdict on the failure stage from what each injected fault did (`failure-scenarios.jsonl`)
    and the logits of the requests that completed (`failure-actual.npz`): for every scenario the job sent, the
    device produced the code the answer expects, the request after the documented recovery matches the
    golden, and a silent corruption shows in the faulty request's logits."""
    try:
        records = _jsonl(workdir / MEASURED_SCENARIOS, _is_scenario_record, SCENARIO_FIELDS)
        logits = read_npz(workdir / MEASURED_FAILURE_LOGITS)
    except ValueError as error:
        return coded_verdict(result, {}, [("no_measurement", said_by(error))], "")
    scenarios = params.get("scenarios")
    if scenarios is None:  # the runner's default: every fault kind, with the code the runtime documents
        scenarios = [
            {"fault": kind.value, "expect_code": int(code), "at_step": 1} for kind, code in EXPECTED_CODES.items()
        ]
    tolerances = params.get("tolerances", {})
    steps = min(params.get("decode_steps") or FAILURE_DECODE_STEPS, golden.decode_steps)
    failures: list[tuple[str, str]] = []
    judged = []
    if not scenarios:
        failures.append(("nothing_injected", Said(gettext_noop("the job injects no fault: nothing to judge"))))
    for index, scenario in enumerate(scenarios):
        label = Said(gettext_noop("scenario %(index)s (%(fault)s)"), index=index, fault=scenario["fault"])
        record = records[index] if index < len(records) else None
        if record is None or record["scenario"] != index or record["fault"] != scenario["fault"]:
            message = Said(
                gettext_noop("%(scenario)s: %(file)s does not report it"), scenario=label, file=MEASURED_SCENARIOS
            )
            failures.append(("scenario_unmeasured", message))
            continue
        asked_step = scenario.get("at_step", 0)  # the protocol's default: the request's first device call
        if record["at_step"] != asked_step:
            message = Said(
                gettext_noop("%(scenario)s: injected at step %(step)s; the job asks for step %(asked)s"),
                scenario=label,
                step=record["at_step"],
                asked=asked_step,
            )
            failures.append(("scenario_unmeasured", message))
        expected = scenario["expect_code"]
        if expected == ErrorCode.SUCCESS and scenario["fault"] != CORRUPTED_OUTPUT:
            # Only a silent corruption ends without an error: a fault "expected" to succeed shows nothing.
            failures.append(
                (
                    "no_fault_effect",
                    Said(
                        gettext_noop("%(scenario)s: an error path expecting SUCCESS proves no fault took effect"),
                        scenario=label,
                    ),
                )
            )
        if record["produced_code"] != expected:
            produced = code_name(record["produced_code"])
            message = Said(
                gettext_noop("%(scenario)s: the device produced %(produced)s; the answer expects %(expected)s"),
                scenario=label,
                produced=produced,
                expected=code_name(expected),
            )
            failures.append(("wrong_error_code", message))
        wrong_recovery = _recovery_failure(record["recovery"], expected, scenario)
        if wrong_recovery:
            message = Said(gettext_noop("%(scenario)s: %(problem)s"), scenario=label, problem=wrong_recovery)
            failures.append(("wrong_recovery", message))
        after = _request_failures(logits.get(f"scenario_{index}_after"), golden, tolerances, steps)
        if not after and record["after_code"] != ErrorCode.SUCCESS:
            after = Said(gettext_noop("ended %(code)s"), code=code_name(record["after_code"]))
        if after:
            message = Said(
                gettext_noop("%(scenario)s: the request after recovery %(problem)s"), scenario=label, problem=after
            )
            failures.append(("not_recovered", message))
        corrupted = None
        if scenario["fault"] == CORRUPTED_OUTPUT:
            faulty = logits.get(f"scenario_{index}_faulty")
            corrupted = faulty is not None and bool(_request_failures(faulty, golden, tolerances, steps))
            if not corrupted:
                message = Said(
                    gettext_noop("%(scenario)s: the faulty request's logits show no corruption"), scenario=label
                )
                failures.append(("corruption_unseen", message))
        judged.append(
            {
                "fault": scenario["fault"],
                "at_step": record["at_step"],
                "expect_code": expected,
                "produced_code": record["produced_code"],
                "produced_name": code_name(record["produced_code"]),
                "corruption_detected": corrupted,
                "recovery": record["recovery"],
                "recovered": not after,
            }
        )
    return coded_verdict(
        result, {"scenarios": judged}, failures, f"{len(judged)} faults produced the expected code and recovered"
    )


# The recovery the runtime documents for each code a fault produces (docs/runner-protocol.md, failure): the
# actions a runner applies, in order; `{chiplet}.{core}` is the scenario's faulted core, `<n>` any chiplet (a
# time-out resets core 0 of the model's first chiplet, which only the device knows).
DOCUMENTED_RECOVERY: dict[int, tuple[str, ...]] = {
    ErrorCode.SUCCESS: (),
    ErrorCode.KV_APPLY_FAILED: (),
    ErrorCode.BUSY: (),
    ErrorCode.CORE_EXCEPTION: ("reset core {chiplet}.{core}",),
    ErrorCode.TIMEOUT: ("reset core <n>.0",),
    ErrorCode.OUT_OF_MEMORY: ("clear dynamic memory",),
    ErrorCode.DEVICE_CRASHED: ("reset device", "configure calbin"),
}


def _recovery_failure(applied: list, code: int, scenario: dict) -> str:
    """What is wrong with the recovery actions a runner applied after a fault that produced `code` (the code
    the answer expects): "" when they are the documented recovery for it."""
    if code not in DOCUMENTED_RECOVERY:
        return Said(
            gettext_noop("no recovery is documented for %(code)s; the runner applied %(applied)s"),
            code=code_name(code),
            applied=str(applied),
        )
    core = {"chiplet": scenario.get("chiplet", 0), "core": scenario.get("core", 0)}
    documented = [action.format(**core) for action in DOCUMENTED_RECOVERY[code]]
    patterns = [re.escape(action).replace("<n>", r"\d+") for action in documented]
    if len(applied) == len(patterns) and all(
        isinstance(action, str) and re.fullmatch(pattern, action)
        for pattern, action in zip(patterns, applied, strict=True)
    ):
        return ""
    return Said(
        gettext_noop("the runner applied %(applied)s; the documented recovery for %(code)s is %(documented)s"),
        applied=str(applied) if applied else Said(gettext_noop("no recovery")),
        code=code_name(code),
        documented=documented or Said(gettext_noop("none")),
    )


def _request_failures(rows: np.ndarray | None, golden: GoldenSet, tolerances: dict[str, dict], steps: int) -> str:
    """What is wrong with one golden request's measured logits (prefill row, then `steps` decode rows): "" when
    they are within tolerance of the golden."""
    if rows is None:
        return Said(gettext_noop("was not measured (no logits)"))
    if rows.dtype != np.uint16 or rows.ndim != 2 or len(rows) != steps + 1:
        return Said(
            gettext_noop("has logits %(dtype)s %(shape)s; %(rows)s BF16 rows were asked"),
            dtype=str(rows.dtype),
            shape=str(list(rows.shape)),
            rows=steps + 1,
        )
    measured = {"prefill_logits": rows[:1], "decode_logits": rows[1:]}
    expected = {"prefill_logits": golden.prefill_logits, "decode_logits": golden.decode_logits[:steps]}
    _, failures = _compared(measured, expected, tolerances)
    if not failures:
        return ""
    return Said(gettext_noop("differs from the golden: %(failures)s"), failures="; ".join(failures[:3]))


def runner_judgement(
    result: dict, workdir: Path, calbin: Path, params: dict, golden_source: str, golden: Path | None
) -> Judgement:
    """calculet's verdict on the runner stage's numbers from its minimal run (`runner-actual.npz`): the golden's
    prompt and `decode_steps` greedy steps, no KV in use after it (the count the runner measured: calculet has no
    view of the device's KV of its own), every logit finite, each token the argmax of its row, rows as wide
    as the package's vocabulary, and the logits those of calculet's own replay on the package's reference. A
    vendor-form package has no replay: its run is of the vendor's golden (`golden_source`, `golden`) and its
    tokens and logits are that golden's."""
    try:
        measured = read_npz(workdir / MEASURED_RUN)
    except ValueError as error:
        return coded_verdict(result, {}, [("no_measurement", said_by(error))], "")
    try:
        reference = package_reference(calbin, result)
        if reference.package is None:
            expected = reference_golden(golden_source, golden, calbin)
            prompt_ids, whose = expected.prompt_ids, Said(gettext_noop("the vendor golden's"))
        else:
            whose = Said(gettext_noop("the package's golden"))
            expected, prompt_ids = None, reference.package.goldens.prompt_ids
    except (NoReference, ValueError) as error:
        return Judgement(False, str(error), [finding("no_reference", said_by(error))])
    steps = params.get("decode_steps") or RUNNER_DECODE_STEPS
    prompt, tokens, rows = (measured.get(name) for name in ("prompt_ids", "tokens", "logits"))
    if prompt is None or tokens is None or rows is None:
        message = Said(gettext_noop("%(file)s must hold prompt_ids, tokens and logits"), file=MEASURED_RUN)
        return coded_verdict(result, {}, [("no_measurement", message)], "")
    if rows.dtype != np.uint16 or rows.ndim != 2 or len(rows) != steps + 1 or tokens.shape != (steps + 1,):
        message = Said(
            gettext_noop("%(file)s must hold %(rows)s tokens and their BF16 logits [%(rows)s, vocab]"),
            file=MEASURED_RUN,
            rows=steps + 1,
        )
        return coded_verdict(result, {}, [("no_measurement", message)], "")
    in_use = measured.get("kv_tokens_in_use")
    if in_use is None or in_use.shape != () or in_use.dtype.kind not in "iu":
        message = Said(
            gettext_noop("%(file)s must hold kv_tokens_in_use, the KV tokens in use after the run (an integer)"),
            file=MEASURED_RUN,
        )
        return coded_verdict(result, {}, [("no_measurement", message)], "")
    failures: list[tuple[str, str]] = []
    if int(in_use) != 0:
        message = Said(gettext_noop("%(tokens)s KV tokens in use after the run"), tokens=int(in_use))
        failures.append(("kv_not_released", message))
    if prompt.tolist() != prompt_ids.tolist():
        failures.append(("wrong_prompt", Said(gettext_noop("the run's prompt is not %(whose)s prompt"), whose=whose)))
    failures += _run_failures(reference, {"prompt": prompt.tolist(), "tokens": tokens.tolist()}, rows)
    if expected is not None and not failures:
        failures += _golden_run_failures(expected, tokens, rows)
    what = "match calculet's replay" if expected is None else "are the vendor golden's (no replay)"
    return coded_verdict(result, {}, failures, f"{steps} decode steps {what}")


def _golden_run_failures(golden: GoldenSet, tokens: np.ndarray, rows: np.ndarray) -> list[tuple[str, str]]:
    """A greedy run of the golden's prompt against the golden: its tokens the golden's argmax tokens and its
    logits within the default tolerance of the golden's, as far as the golden itself was fed greedily (past a
    decode input that is not its row's argmax the two runs see different tokens)."""
    expected = np.concatenate([golden.prefill_logits, golden.decode_logits])
    greedy = np.argmax(as_float32(expected), axis=1)
    inputs = golden.decode_input_ids.tolist()
    followed = next((i for i, token in enumerate(inputs) if token != greedy[i]), len(inputs))
    compared = min(len(tokens), followed + 1)
    if tokens[:compared].tolist() != greedy[:compared].tolist():
        message = Said(
            gettext_noop("the greedy tokens %(tokens)s are not the vendor golden's %(golden)s for its prompt"),
            tokens=str(tokens[:compared].tolist()),
            golden=str(greedy[:compared].tolist()),
        )
        return [("golden_tokens_mismatch", message)]
    report = compare(expected[:compared], rows[:compared], Tolerance())
    if report["failures"]:
        message = Said(gettext_noop("against the vendor golden: %(limits)s"), limits="; ".join(report["failures"][:3]))
        return [("reference_mismatch", message)]
    return []


def integration_judgement(result: dict, workdir: Path, calbin: Path, params: dict) -> Judgement:
    """calculet's verdict on the integration stage from each served sequence (`integration-sequences.jsonl`)
    and its logits (`integration-actual.npz`): every sequence the job implies was served to its length without
    error, each token the argmax of its row, and each one's logits match calculet's own replay of it alone on
    the package's reference (a vendor-form package, which only a board runs, has no replay)."""
    try:
        records = _jsonl(workdir / MEASURED_SEQUENCES, _is_sequence_record, SEQUENCE_FIELDS)
        logits = read_npz(workdir / MEASURED_SEQUENCE_LOGITS)
        reference = package_reference(calbin, result)
    except NoReference as error:
        return Judgement(False, str(error), [finding("no_reference", said_by(error))])
    except ValueError as error:
        return coded_verdict(result, {}, [("no_measurement", said_by(error))], "")
    defaults = {name: spec.default for name, spec in INTEGRATION_PARAMS.items()}
    wanted, new_tokens, seed = (params.get(name, defaults[name]) for name in ("sequences", "max_new_tokens", "seed"))
    # With the package's declared vocabulary calculet knows the prompts the job's seed gives: the runner does not
    # choose them.
    prompts = prompts_for(seed, wanted, reference.vocab)
    failures: list[tuple[str, str]] = []
    if len(records) != wanted or sorted(r["sequence"] for r in records) != list(range(1, wanted + 1)):
        message = Said(
            gettext_noop("%(file)s lists %(listed)s sequences; the job serves %(wanted)s"),
            file=MEASURED_SEQUENCES,
            listed=len(records),
            wanted=wanted,
        )
        failures.append(("too_few_sequences", message))
    errors = Counter(r["error"] for r in records if r["error"] is not None)
    if errors:
        message = Said(
            gettext_noop("%(failed)s sequences failed: %(errors)s"),
            failed=sum(errors.values()),
            errors=str(dict(errors)),
        )
        failures.append(("errors_in_service", message))
    matched = 0
    for record in records:
        if record["error"] is not None:
            continue
        label = Said(gettext_noop("sequence %(sequence)s"), sequence=record["sequence"])
        asked = max(1, new_tokens - (record["sequence"] - 1) % 3)
        rows = logits.get(f"sequence_{record['sequence']}")
        if 1 <= record["sequence"] <= wanted and record["prompt"] != prompts[record["sequence"] - 1]:
            message = Said(
                gettext_noop("%(sequence)s: its prompt is not the one the job's seed %(seed)s gives"),
                sequence=label,
                seed=seed,
            )
            failures.append(("wrong_prompt", message))
        elif len(record["tokens"]) != asked:
            message = Said(
                gettext_noop("%(sequence)s: %(generated)s tokens generated; %(asked)s were asked"),
                sequence=label,
                generated=len(record["tokens"]),
                asked=asked,
            )
            failures.append(("incomplete", message))
        elif rows is None or rows.dtype != np.uint16 or rows.ndim != 2 or len(rows) != asked:
            message = Said(
                gettext_noop("%(sequence)s: %(file)s holds no [%(asked)s, vocab] BF16 logits"),
                sequence=label,
                file=MEASURED_SEQUENCE_LOGITS,
                asked=asked,
            )
            failures.append(("no_measurement", message))
        else:
            problems = _run_failures(reference, record, rows)
            failures += [
                (code, Said(gettext_noop("%(sequence)s: %(problem)s"), sequence=label, problem=message))
                for code, message in problems
            ]
            matched += not problems
    replayed = reference.package is not None
    metrics = {"judged_sequences": {"served": len(records), "matched": matched, "replayed": replayed}}
    what = "match calculet's replay alone" if replayed else "are greedy, finite and vocabulary-wide (no replay)"
    return coded_verdict(result, metrics, failures, f"{matched} sequences served {what}")


class NoReference(Exception):
    pass


@dataclass(frozen=True)
class PackageReference:
    """What calculet knows of a package to judge a greedy run by: the vocabulary and positions it declares, and
    the package loaded for a replay on its reference (None for a vendor-form package, which only a board runs:
    its runs are held to its declared vocabulary and, at the runner stage, to the vendor's golden)."""

    vocab: int
    max_seq_len: int
    package: Calbin | None


def package_reference(calbin: Path, result: dict) -> PackageReference:
    """The package as calculet judges its runs, checked against the device the result reports. NoReference
    when it cannot be loaded, or a vendor-form package declares no model (its __Tokenizer/config.json)."""
    try:
        with open_package(calbin) as package:
            meta = read_meta(package)
        if meta.form == VENDOR_FORM:
            if meta.config is None:
                raise NoReference(
                    Said(
                        gettext_noop(
                            "the vendor-form package declares no model config (__Tokenizer/config.json with the "
                            "prefill's input length): no vocabulary to judge its logits by"
                        )
                    )
                )
            return PackageReference(meta.config.vocab, meta.config.max_seq_len, None)
        loaded = load_calbin(calbin, _device_versions(result))
    except (CalrtError, CalbinError, OSError, KeyError, ValueError) as error:
        raise NoReference(
            Said(gettext_noop("the package cannot be loaded for calculet's reference: %(error)s"), error=str(error))
        ) from error
    return PackageReference(loaded.config.vocab, loaded.max_seq_len, loaded)


def _run_failures(reference: PackageReference, record: dict, rows: np.ndarray) -> list[tuple[str, str]]:
    """What is wrong with one greedy run (its prompt, its tokens, the logits each token was chosen from): a
    logit not finite, a token not its row's argmax (first index on ties), rows not as wide as the package's
    vocabulary, a prompt outside it or longer than the package holds, logits other than calculet's replay on
    the package's reference (when there is one)."""
    values = as_float32(rows)
    if not np.isfinite(values).all():
        message = Said(gettext_noop("%(count)s logits are not finite"), count=int((~np.isfinite(values)).sum()))
        return [("logits_not_finite", message)]
    if np.argmax(values, axis=1).tolist() != list(record["tokens"]):
        return [
            ("not_greedy", Said(gettext_noop("a generated token is not the argmax of the logits it was chosen from")))
        ]
    vocab, positions = reference.vocab, len(record["prompt"]) + len(record["tokens"])
    if rows.shape[1] != vocab:
        message = Said(
            gettext_noop("logits %(width)s wide; the package's vocabulary is %(vocab)s"),
            width=rows.shape[1],
            vocab=vocab,
        )
        return [("reference_mismatch", message)]
    if not record["prompt"] or any(not 0 <= t < vocab for t in record["prompt"]):
        return [
            (
                "reference_mismatch",
                Said(gettext_noop("prompt token ids outside the vocabulary of %(vocab)s"), vocab=vocab),
            )
        ]
    if positions > reference.max_seq_len:
        message = Said(
            gettext_noop("%(positions)s positions; the package holds %(held)s"),
            positions=positions,
            held=reference.max_seq_len,
        )
        return [("reference_mismatch", message)]
    if reference.package is None:
        return []
    report = compare(reference.package.reference_logits(record["prompt"], record["tokens"]), rows, Tolerance())
    if not report["failures"]:
        return []
    # The comparison's own figures (`max_rel 0.0123 > 0.01`), the same in every language.
    return [("reference_mismatch", Said(gettext_noop("%(limits)s"), limits="; ".join(report["failures"][:3])))]


def _device_versions(result: dict) -> dict:
    device = result.get("device")
    if not isinstance(device, dict):
        device = {}
    return {key: str(device.get(key, "")) for key in ("calrt", "driver", "firmware", "chip")}


def code_name(code: int) -> str:
    return f"{ErrorCode(code).name} ({code})" if code in set(ErrorCode) else f"code {code}"


def _is_scenario_record(record: dict) -> bool:
    return (
        _is_int(record["scenario"])
        and isinstance(record["fault"], str)
        and _is_int(record["at_step"])
        and isinstance(record["recovery"], list)
        and _is_int(record["produced_code"])
        and _is_int(record["after_code"])
    )


def _is_sequence_record(record: dict) -> bool:
    return (
        _is_int(record["sequence"])
        and all(isinstance(ids, list) and all(_is_int(t) for t in ids) for ids in (record["prompt"], record["tokens"]))
        and (record["error"] is None or isinstance(record["error"], str))
    )


def _jsonl(path: Path, valid, fields: str) -> list[dict]:
    """A measurement file of one JSON object a line; ValueError naming what is wrong with it."""
    if not path.is_file():
        raise ValueError(Said(NOTHING_MEASURED, file=path.name))
    records = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        try:
            record = json.loads(line)
            good = isinstance(record, dict) and valid(record)
        except (ValueError, KeyError, TypeError):
            good = False
        if not good:
            raise ValueError(
                Said(
                    gettext_noop("%(file)s line %(line)s must be an object with %(fields)s"),
                    file=path.name,
                    line=number,
                    fields=fields,
                )
            )
        records.append(record)
    return records


def read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ValueError(Said(NOTHING_MEASURED, file=path.name))
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(
            Said(gettext_noop("%(file)s is not an .npz file: %(error)s"), file=path.name, error=str(error))
        ) from error


def _golden_tensors(golden: GoldenSet) -> dict[str, np.ndarray]:
    return {"prefill_logits": golden.prefill_logits, "decode_logits": golden.decode_logits}


def _compared(
    measured: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    tolerances: dict[str, dict],
    response: int | None = None,
) -> tuple[dict, list[str]]:
    """Each measured tensor against the expected one with its tolerances: the reports and the failures, each
    named by its tensor (and the soak's sampled `response`). A broken limit is the comparison's own figures
    (`max_rel 0.0123 > 0.01`), the same in every language."""
    reports: dict = {}
    failures: list[str] = []
    for name in GOLDEN_TENSORS:
        if measured[name].shape != expected[name].shape:
            message = Said(
                gettext_noop("%(tensor)s: measured %(measured)s, the golden has %(golden)s"),
                tensor=name,
                measured=str(list(measured[name].shape)),
                golden=str(list(expected[name].shape)),
            )
            failures.append(_of_response(response, message))
            continue
        report = compare(expected[name], measured[name], Tolerance.from_dict(tolerances.get(name, {})))
        report["rows"] = row_figures(expected[name], measured[name], report["k"])  # kept with the run, to draw
        reports[name] = report
        failures += [
            _of_response(response, Said(gettext_noop("%(tensor)s: %(limit)s"), tensor=name, limit=failure))
            for failure in report["failures"]
        ]
    return reports, failures


def _of_response(response: int | None, problem: Said) -> Said:
    if response is None:
        return problem
    return Said(gettext_noop("response %(response)s %(problem)s"), response=response, problem=problem)


def _verdict(result: dict, metrics: dict, failures: list[str], passed: str) -> Judgement:
    return coded_verdict(result, metrics, [("golden_mismatch", failure) for failure in failures], passed)


FINDING_FIELDS = {"golden_mismatch": "measurements.golden"}
# A judgement's reason names at most this many of its failures; its findings name every one.
JUDGED_IN_REASON = 5


def coded_verdict(result: dict, metrics: dict, failures: list[tuple[str, str]], passed: str) -> Judgement:
    """Pass when nothing failed; otherwise a failure naming what did, led by `claim_unsupported` when the
    runner's result says pass."""
    findings = [finding(code, message, FINDING_FIELDS.get(code, "measurements")) for code, message in failures]
    messages = [message for _, message in failures]
    if failures and result.get("verdict") == "pass":
        reason = Said(CLAIM_UNSUPPORTED, detail=together(messages[:JUDGED_IN_REASON]))
        findings.insert(0, finding("claim_unsupported", reason))
        return Judgement(False, reason, findings, metrics)
    if failures:
        return Judgement(False, "; ".join(messages[:JUDGED_IN_REASON]), findings, metrics)
    return Judgement(True, passed, [], metrics)


# The float model the team integrates, as calculet holds it: the simulator's preset and the seed of its float32
# weights. Every package stands for it; an S8 package's accuracy is measured against it.
FLOAT_MODEL = ("tiny", 0)


def probe_judgements(probes: list[dict], workdir: Path, calbin_path: Path, golden: GoldenSet) -> dict[str, Judgement]:
    """calculet's verdicts on what the golden stage's probes claim a package computes, by metrics key: `vs_float`
    for an S8 package (the s8 probe's thresholds), `sampling_fit` for device sampling (the sampling probe's
    parameters and threshold)."""
    judgements = {}
    for probe in probes:
        if probe["name"] == "s8":
            thresholds = PROBES["s8"].parse_params(probe.get("params"), "probes.s8")
            judgements["vs_float"] = s8_float_judgement(workdir, calbin_path, golden, thresholds)
        if probe["name"] == "sampling":
            params = PROBES["sampling"].parse_params(probe.get("params"), "probes.sampling")
            judgements["sampling_fit"] = sampling_judgement(workdir, golden, params)
    return judgements


def float_model_logits(calbin_path: Path, golden: GoldenSet) -> np.ndarray:
    """The BF16 logits of calculet's float model for the golden's prompt and decode tokens; ValueError when the
    package's model is not that model."""
    preset, seed = FLOAT_MODEL
    try:
        with open_package(calbin_path) as package:
            config = read_meta(package).config
    except (OSError, CalbinError) as error:
        raise ValueError(
            Said(gettext_noop("the package's model config cannot be read: %(error)s"), error=str(error))
        ) from error
    if config != PRESETS[preset]:
        raise ValueError(
            Said(
                gettext_noop("the package's model config is not the float model's (%(preset)s): %(config)s"),
                preset=preset,
                config=str(config),
            )
        )
    model = ReferenceModel(config, init_weights(config, seed))
    rows = teacher_forced_rows(model, golden.prompt_ids.tolist(), golden.decode_input_ids.tolist())
    return to_bf16(rows)


def s8_float_judgement(workdir: Path, calbin_path: Path, golden: GoldenSet, thresholds: dict) -> Judgement:
    """The device's measured logits (the golden stage's) against calculet's float model, within the s8 probe's
    `cosine_min_vs_float`, `top1_min_vs_float` and `max_rel_vs_float`."""
    try:
        measured = _measured_logits(workdir / MEASURED_LOGITS)
        expected = float_model_logits(calbin_path, golden)
    except ValueError as error:
        said = Said(gettext_noop("s8: %(problem)s"), problem=said_by(error))
        return Judgement(False, str(said), [finding("no_float_reference", said, "measurements.vs_float")])
    actual = np.concatenate([measured[name] for name in GOLDEN_TENSORS])
    if actual.shape != expected.shape:
        said = Said(
            gettext_noop("s8: measured %(measured)s logits, the float model gives %(expected)s"),
            measured=str(list(actual.shape)),
            expected=str(list(expected.shape)),
        )
        return Judgement(False, str(said), [finding("float_mismatch", said, "measurements.vs_float")])
    limits = Tolerance(
        max_abs=None,
        max_rel=thresholds["max_rel_vs_float"],
        cosine_min=thresholds["cosine_min_vs_float"],
        top1_min=thresholds["top1_min_vs_float"],
        topk_min=0.0,
    )
    report = compare(expected, actual, limits)
    if report["failures"]:
        said = Said(gettext_noop("s8: against the float model %(limits)s"), limits="; ".join(report["failures"]))
        return Judgement(False, str(said), [finding("float_mismatch", said, "measurements.vs_float")], report)
    return Judgement(True, "s8: the measured logits are within the S8 limits of the float model", [], report)


def _measured_draws(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ValueError(Said(gettext_noop("the runner wrote no %(file)s: no draws measured to judge"), file=path.name))
    arrays = read_npz(path)
    for name in ("draws", "repeat", "golden_sampled"):
        if name not in arrays or arrays[name].ndim != 1 or arrays[name].dtype.kind not in "iu":
            raise ValueError(
                Said(gettext_noop("%(file)s: %(array)s must be a 1-D array of token ids"), file=path.name, array=name)
            )
    return arrays


def _sampling(problem: str) -> Said:
    return Said(SAMPLING, problem=problem)


def sampling_judgement(workdir: Path, golden: GoldenSet, params: dict) -> Judgement:
    """The device's sampled tokens judged by calculet: `draws` of them (counters 0..draws-1 with the job's seed)
    are exactly the tokens the device's sampling op (`npu_sim.sampling.device_sample` over the counter-based
    uniforms of the job's seed) draws from the device's measured prefill logits for the golden's prompt, and
    drawn again they are those tokens again; they follow the host reference sampler's distribution on the same
    logits (Pearson's chi-square, p-value at least `min_p_value`; no draw outside the reference's support);
    and the tokens sampled on the golden's request are the golden's."""
    try:
        measured = _measured_draws(workdir / MEASURED_DRAWS)
        row = bits_to_float32(_measured_logits(workdir / MEASURED_LOGITS)["prefill_logits"])[0]
    except ValueError as error:
        said = _sampling(said_by(error))
        return Judgement(False, str(said), [finding("no_measurement", said, "measurements.sampling")])
    drawn, repeat, draws = measured["draws"], measured["repeat"], params["draws"]
    sampler = SamplingParams(params["temperature"], params["top_k"], params["top_p"], params["seed"])
    failures: list[tuple[str, str]] = []
    if len(drawn) != draws or (len(drawn) and not 0 <= drawn.min() <= drawn.max() < len(row)):
        message = Said(
            gettext_noop("%(measured)s draws measured, %(draws)s token ids in 0..%(last)s asked for"),
            measured=len(drawn),
            draws=draws,
            last=len(row) - 1,
        )
        failures.append(("sampling_mismatch", message))
        fit = None
    else:
        probabilities, boundary = reference_probabilities(row, sampler)
        fit = chi_square_test(drawn, probabilities, boundary)
        if not fit.p_value >= params["min_p_value"]:
            message = Said(
                gettext_noop(
                    "chi-square %(statistic).1f on %(dof)s degrees of freedom over %(draws)s draws against the "
                    "reference sampler (%(sampler)s): p = %(p).3g < %(minimum)s"
                ),
                statistic=fit.statistic,
                dof=fit.dof,
                draws=draws,
                sampler=str(sampler.as_dict()),
                p=fit.p_value,
                minimum=params["min_p_value"],
            )
            failures.append(("sampling_mismatch", message))
        if fit.outside_support:
            failures.append(
                (
                    "sampling_mismatch",
                    Said(
                        gettext_noop("%(count)s draws of tokens the reference sampler never draws"),
                        count=fit.outside_support,
                    ),
                )
            )
        # What the job's seed makes the sampling op draw: another generator's draws may fit the distribution.
        seeded = device_sample(row, sampler, counter_uniforms(sampler.seed, np.arange(draws)))
        for name, tokens in ((Said(gettext_noop("drawn")), drawn), (Said(gettext_noop("drawn again")), repeat)):
            if tokens.shape != seeded.shape:
                continue  # `repeat` of another length: named below
            wrong = np.flatnonzero(tokens != seeded)
            if len(wrong):
                message = Said(
                    gettext_noop(
                        "%(which)s, %(wrong)s of %(draws)s tokens are not the ones seed %(seed)s gives at their "
                        "counters (the first at counter %(first)s)"
                    ),
                    which=name,
                    wrong=len(wrong),
                    draws=draws,
                    seed=sampler.seed,
                    first=int(wrong[0]),
                )
                failures.append(("draws_not_from_seed", message))
    if not np.array_equal(drawn, repeat):
        differ = int(np.count_nonzero(drawn != repeat)) if drawn.shape == repeat.shape else len(drawn)
        failures.append(
            (
                "sampling_mismatch",
                Said(
                    gettext_noop("drawn again with seed %(seed)s, %(differ)s of %(drawn)s tokens differ"),
                    seed=sampler.seed,
                    differ=differ,
                    drawn=len(drawn),
                ),
            )
        )
    if golden.sampled is None:
        message = Said(gettext_noop("the golden (%(source)s) holds no sampled tokens to compare"), source=golden.source)
        failures.append(("sampling_mismatch", message))
    elif measured["golden_sampled"].tolist() != golden.sampled.token_ids.tolist():
        message = Said(
            gettext_noop("on the golden's request the device sampled %(sampled)s, the golden %(golden)s"),
            sampled=str(measured["golden_sampled"].tolist()),
            golden=str(golden.sampled.token_ids.tolist()),
        )
        failures.append(("sampling_mismatch", message))
    figures = fit.as_dict() if fit is not None else {}
    if failures:
        reason = "sampling: " + "; ".join(message for _, message in failures)
        findings = [finding(code, _sampling(message), "measurements.sampling") for code, message in failures]
        return Judgement(False, reason, findings, figures)
    reason = "sampling: the device's draws are the ones the job's seed gives, follow the reference sampler and repeat"
    return Judgement(True, reason, [], figures)
