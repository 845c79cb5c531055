"""The runner protocol from the caller's side (docs/runner-protocol.md): the job a stage sends, and how a
runner's exit and result file become a verdict. No ORM here.

A runner is `<command> --job job.json --result result.json`. It exits 0 whenever it reached a verdict
(pass or fail) and writes the result; exit 2 means it refused a broken job. Jobs are schema 2: the
capability's probes, the vendor's golden, and a result that reports the device's own identity and versions,
which the caller compares with the target's registration (`device_findings`).
"""

from dataclasses import dataclass, field
from pathlib import Path

from calculet_agent.sandbox import Outcome

from acceptance import stages
from acceptance.limits import (
    DEFAULT_GOLDEN_TOLERANCES,
    DEFAULT_SOAK,
    GOLDEN_MIN_STEPS_KEY,
    GOLDEN_TENSORS,
    INTEGER_PARAMS,
    MIN_GOLDEN_DECODE_STEPS,
    SOAK_THRESHOLD_KEYS,
)
from calculet.json_text import storable_json_loads

SCHEMA_VERSION = 2
VERSION_KEYS = ("calrt", "driver", "firmware", "chip")
RESULT_MAX_BYTES = 16 * 1024**2
# A measurement file calculet-agent sends back with its result (acceptance.probe_judging.measured_files).
MEASUREMENT_MAX_BYTES = 64 * 1024**2


@dataclass
class StageOutcome:
    verdict: str
    reason: str = ""
    findings: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)


def _number(name: str, value):
    """Whole numbers where the runner wants integers (JSON answers may carry 8.0 for 8)."""
    if name in INTEGER_PARAMS and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def golden_tolerances(answer_tolerances: dict) -> dict:
    """Per-tensor tolerances: the defaults, then the answer's plain keys (every tensor), then its
    "<tensor>.<key>" keys (that tensor only)."""
    tolerances = {}
    for tensor in GOLDEN_TENSORS:
        values = dict(DEFAULT_GOLDEN_TOLERANCES)
        values.update({k: v for k, v in answer_tolerances.items() if "." not in k})
        prefix = f"{tensor}."
        values.update({k.removeprefix(prefix): v for k, v in answer_tolerances.items() if k.startswith(prefix)})
        tolerances[tensor] = {k: _number(k, v) for k, v in values.items()}
    return tolerances


def tolerance_rule(name: str, value) -> str:
    """A golden tolerance as the runner applies it: `cosine_min` 0.9999 is "cosine ≥ 0.9999", `max_rel` 0.01 is
    "max_rel ≤ 0.01", `k` 5 is "k = 5" (the depth of the top-k agreement); a "<tensor>." prefix is kept."""
    tensor, _, key = name.rpartition(".")
    prefix = f"{tensor}." if tensor else ""
    if key.endswith("_min"):
        return f"{prefix}{key.removesuffix('_min')} ≥ {value}"
    if key.startswith("max_") or key.endswith("_max"):
        return f"{prefix}{key} ≤ {value}"
    return f"{prefix}{key} = {value}"


def stage_params(stage: str, *, golden_tolerances_given: dict, error_paths: list[dict], thresholds: dict) -> dict:
    """The job parameters of a runner stage, from the answer's structured fields and the defaults above."""
    if stage == stages.GOLDEN:
        min_steps = _number("min_decode_steps", thresholds.get(GOLDEN_MIN_STEPS_KEY, MIN_GOLDEN_DECODE_STEPS))
        return {"tolerances": golden_tolerances(golden_tolerances_given), "min_decode_steps": min_steps}
    if stage == stages.FAILURE:
        return {
            "scenarios": [{"fault": path["scenario"], "expect_code": path["expect_code"]} for path in error_paths],
            "tolerances": golden_tolerances(golden_tolerances_given),
        }
    if stage == stages.SOAK:
        params: dict = dict(DEFAULT_SOAK)
        for key, name in SOAK_THRESHOLD_KEYS.items():
            if key in thresholds:
                params[name] = _number(name, thresholds[key])
        # The golden under load: the sampled responses are held to the golden stage's tolerances.
        params["tolerances"] = golden_tolerances(golden_tolerances_given)
        return params
    return {}


def build_job(
    *,
    stage: str,
    calbin: str,
    params: dict,
    target: dict,
    probes: list[dict] | None = None,
    golden: str | None = None,
    golden_source: str = "vendor",
    packages: dict[str, str] | None = None,
) -> dict:
    """A schema 2 job. `probes` are `{"name", "params"}` (thresholds travel as parameters); with
    `golden_source` "vendor" the golden comparisons use `golden`, the file the vendor delivered, and nothing
    else (no golden: they are not exercised); "package" uses the package's own goldens. `packages` are the
    extra packages by role (`second`: the other model of the multi-model and residency probes)."""
    job = {
        "schema_version": SCHEMA_VERSION,
        "stage": stage,
        "calbin": calbin,
        "params": params,
        "target": target,
        "probes": probes or [],
        "golden_source": golden_source,
    }
    if packages:
        job["packages"] = packages
    if golden is not None:
        job["golden"] = golden
    return job


def device_findings(result: dict, registered: dict) -> list[dict]:
    """What is wrong with the device a result reports, against the target's registered versions: nothing
    reported (`device_unreported`), or versions that differ (`version_mismatch`, one finding naming each)."""
    device = result.get("device")
    if not isinstance(device, dict):
        return [
            {
                "code": "device_unreported",
                "severity": "error",
                "field": "device",
                "message": "the runner reported no device identity and versions",
            }
        ]
    found = []
    for key in VERSION_KEYS:
        reported = str(device.get(key, ""))
        if reported != registered.get(key):
            found.append(
                {
                    "code": "version_mismatch",
                    "severity": "error",
                    "field": f"device.{key}",
                    "message": f"the device reports {key} {reported or '(none)'}; the target is registered with "
                    f"{registered.get(key)}",
                }
            )
    return found


def device_attested(result: dict, target_kind: str) -> bool:
    """Whether a result was measured on a board: a hardware target whose runner reports a hardware device that
    is not a test double. Only such a result is E0 evidence; anything else is a model of the device (E4)."""
    device = result.get("device") or {}
    return target_kind == "hardware" and device.get("kind") == "hardware" and device.get("double") is not True


def probe_findings(result: dict) -> list[dict]:
    """Each probe's findings, named by probe, as the run's findings."""
    found = []
    for probe in result.get("probes", []):
        for item in probe.get("findings", []):
            found.append(
                {
                    "code": item.get("code", ""),
                    "severity": "error" if probe.get("verdict") != stages.PASS else "info",
                    "field": f"probes.{probe.get('name', '?')}",
                    "message": item.get("message", ""),
                }
            )
    return found


def read_result(path: Path, stage: str) -> tuple[dict | None, str]:
    """The runner's result file, or None and what is wrong with it."""
    if not path.is_file():
        return None, "the runner wrote no result file"
    if path.stat().st_size > RESULT_MAX_BYTES:
        return None, f"the result file is larger than {RESULT_MAX_BYTES} bytes"
    return parse_result(path.read_bytes(), stage)


def parse_result(raw: bytes | None, stage: str) -> tuple[dict | None, str]:
    """The runner's result from the bytes of its result file (None: it wrote none), or None and what is wrong."""
    if raw is None:
        return None, "the runner wrote no result file"
    if len(raw) > RESULT_MAX_BYTES:
        return None, f"the result file is larger than {RESULT_MAX_BYTES} bytes"
    try:
        result = storable_json_loads(raw)  # stored as written: NaN or a NUL character would fail the write
    except ValueError as error:
        return None, f"the result file is not JSON: {error}"
    if not isinstance(result, dict):
        return None, "the result is not a JSON object"
    if result.get("schema_version") != SCHEMA_VERSION:
        return None, f"result schema_version is {result.get('schema_version')!r}, expected {SCHEMA_VERSION}"
    if result.get("stage") != stage:
        return None, f"the result is for stage {result.get('stage')!r}, not {stage!r}"
    if result.get("verdict") not in (stages.PASS, stages.FAIL):
        return None, f"result verdict is {result.get('verdict')!r}, expected pass or fail"
    checks = result.get("checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, dict) and "passed" in c for c in checks):
        return None, "result checks must be a list of objects with name, passed and detail"
    if not isinstance(result.get("metrics", {}), dict):
        return None, "result metrics must be an object"
    probes = result.get("probes", [])
    if not isinstance(probes, list) or not all(isinstance(p, dict) and "verdict" in p for p in probes):
        return None, "result probes must be a list of objects with name and verdict"
    if result["verdict"] == stages.PASS and any(p["verdict"] != stages.PASS for p in probes):
        return None, "the result says pass while one of its probes did not pass"
    if result["verdict"] == stages.PASS and not all(check["passed"] is True for check in checks):
        return None, "the result says pass while one of its checks failed"
    if (
        result["verdict"] == stages.FAIL
        and checks
        and all(check["passed"] is True for check in checks)
        and all(p["verdict"] == stages.PASS for p in probes)
    ):
        return None, "the result says fail while every check and probe passed"
    return result, ""


def check_findings(result: dict) -> list[dict]:
    """A finding for each check that did not pass, the result's own and each probe's: a failed run names what
    failed in its findings even when its runner reported no finding of its own."""
    found = []
    checks = [("checks", check) for check in result.get("checks", [])]
    for probe in result.get("probes", []):
        checks += [(f"probes.{probe.get('name', '?')}.checks", check) for check in probe.get("checks", [])]
    for where, check in checks:
        if check.get("passed") is not True:
            name = check.get("name", "?")
            found.append(
                {
                    "code": "check_failed",
                    "severity": "error",
                    "field": f"{where}.{name}",
                    "message": f"{name}: {check.get('detail', '')}".strip().rstrip(":"),
                }
            )
    return found


def _failed_checks(result: dict) -> str:
    failed = [c for c in result.get("checks", []) if c.get("passed") is not True]
    if not failed:
        return "the runner reported a failure without naming a check"
    parts = [f"{c.get('name', '?')}: {c.get('detail', '')}".strip().rstrip(":") for c in failed[:5]]
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return f"{len(failed)} check(s) failed — " + "; ".join(parts) + more


def _failed_probes(result: dict) -> str:
    failed = [p for p in result.get("probes", []) if p.get("verdict") != stages.PASS]
    parts = []
    for probe in failed[:5]:
        said = [f"{f.get('code')}: {f.get('message')}" for f in probe.get("findings", [])[:2]]
        said += [
            f"{c.get('name', '?')}: {c.get('detail', '')}".strip().rstrip(":")
            for c in probe.get("checks", [])
            if c.get("passed") is not True
        ][:3]
        parts.append(f"{probe.get('name', '?')} ({'; '.join(said) or 'failed'})")
    return f"{len(failed)} probe(s) failed — " + "; ".join(parts) if failed else ""


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("PROGRESS ")]
    return lines[-1][:300] if lines else ""


@dataclass(frozen=True)
class RunnerEnd:
    """How the runner's process ended, as the sandbox saw it (here, or on an agent's host)."""

    exit_code: int | None
    limit_hit: str | None
    reason: str
    sandbox: dict
    detached_processes: int = 0  # processes the runner left to outlive it (the sandbox killed them)

    @classmethod
    def of(cls, outcome: Outcome) -> "RunnerEnd":
        return cls(
            outcome.exit_code, outcome.limit_hit, outcome.reason, outcome.sandbox_record(), outcome.detached_processes
        )


def outcome_verdict(outcome: Outcome, result_path: Path, stage: str, stderr_tail: str) -> StageOutcome:
    """The verdict of a runner stage run here, from how the runner ended and the result file it wrote."""
    return runner_verdict(RunnerEnd.of(outcome), read_result(result_path, stage), stage, stderr_tail)


def runner_verdict(end: RunnerEnd, read: tuple[dict | None, str], stage: str, stderr_tail: str) -> StageOutcome:
    """The verdict of a runner stage from how the runner ended and its result as read (`read_result`,
    `parse_result`).

    A limit, a crash, a refused job or a malformed result is an `error` (the run proves nothing either way);
    only a well-formed result reached by a runner that exited 0 is a pass or a fail. Processes the runner
    tried to leave behind are a finding whatever the verdict (`left_behind_findings`).
    """
    sandbox = end.sandbox
    left_behind = left_behind_findings(end)
    if end.limit_hit is not None:
        return StageOutcome(stages.ERROR, end.reason, left_behind, result={"sandbox": sandbox})
    if end.exit_code == 2:
        detail = _last_line(stderr_tail)
        reason = f"the runner refused the job (exit 2): {detail}".rstrip(": ")
        return StageOutcome(stages.ERROR, reason, left_behind, result={"sandbox": sandbox})
    if end.exit_code != 0:
        detail = _last_line(stderr_tail)
        reason = f"{end.reason}: {detail}" if detail else end.reason
        return StageOutcome(stages.ERROR, reason, left_behind, result={"sandbox": sandbox})
    result, problem = read
    if result is None:
        return StageOutcome(
            stages.ERROR, f"runner protocol violated: {problem}", left_behind, result={"sandbox": sandbox}
        )
    verdict = result["verdict"]
    if verdict == stages.PASS:
        reason = "all checks passed"
    elif all(check.get("passed") is True for check in result.get("checks", [])) and result.get("probes"):
        reason = _failed_probes(result)
    else:
        reason = _failed_checks(result)
    return StageOutcome(
        verdict,
        reason,
        findings=[*probe_findings(result), *check_findings(result), *left_behind],
        metrics=result.get("metrics", {}),
        result={**result, "sandbox": sandbox},
    )


def left_behind_findings(end: RunnerEnd) -> list[dict]:
    """A runner that started processes in sessions of their own, or left some running as it exited, tried to
    leave them running after it: the
    sandbox killed them, and the verdict says so (a runner for a board must not leave anything behind)."""
    if not end.detached_processes:
        return []
    return [
        {
            "code": "processes_left_behind",
            "severity": "warning",
            "field": "sandbox",
            "message": (
                f"the runner left {end.detached_processes} process(es) to outlive it (daemonised: in a session "
                "of their own, or still running when it exited); the sandbox killed them when the runner ended"
            ),
        }
    ]
