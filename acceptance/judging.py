"""calculet's own verdict on what a runner measured. No ORM here, nothing of Django.

A runner measures; calculet judges. The golden stage's runner must leave the device's logits in the file the
protocol names (`golden-actual.npz`, BF16 bit patterns, `prefill_logits` and `decode_logits`), the soak's the
logits of its sampled golden requests (`soak-golden-actual.npz`, one row of each per request); calculet
compares them with the golden the job named, with the job's tolerances, using its own comparison
(`npu_sim.golden.compare`, which the runner never supplies). The runner's `verdict`, checks and metrics do
not decide: a result that says pass where the measured logits do not is a failure naming the mismatch, and a
result with no measured logits proves nothing.
"""

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from acceptance.limits import GOLDEN_TENSORS
from npu_sim.calbin.findings import CalbinError
from npu_sim.calbin.goldens import GoldenError, GoldenSet, read_golden
from npu_sim.calbin.layout import GOLDEN
from npu_sim.calbin.package import open_package
from npu_sim.golden import Tolerance, compare, row_figures

MEASURED_LOGITS = "golden-actual.npz"
MEASURED_UNDER_LOAD = "soak-golden-actual.npz"


@dataclass
class Judgement:
    passed: bool
    reason: str
    findings: list[dict] = field(default_factory=list)
    tensors: dict = field(default_factory=dict)


def finding(code: str, message: str, field_name: str = "measurements") -> dict:
    return {"code": code, "severity": "error", "field": field_name, "message": message}


def _measured_logits(path: Path, ndim: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """The device's logits the runner wrote; ValueError naming what is wrong with the file."""
    if not path.is_file():
        raise ValueError(f"the runner wrote no {path.name}: nothing measured to judge")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path.name} is not an .npz file: {error}") from error
    missing = [name for name in GOLDEN_TENSORS if name not in arrays]
    if missing:
        raise ValueError(f"{path.name} holds no {', '.join(missing)}")
    ndim = ndim or {"prefill_logits": 2, "decode_logits": 2}
    for name in GOLDEN_TENSORS:
        if arrays[name].dtype != np.uint16 or arrays[name].ndim != ndim[name]:
            raise ValueError(f"{path.name}: {name} must be BF16 bit patterns (uint16) with {ndim[name]} dimensions")
    return arrays


def reference_golden(golden_source: str, golden_path: Path | None, calbin_path: Path) -> GoldenSet:
    """The golden the job named, read by calculet: the vendor's file, or the package's own golden."""
    try:
        if golden_source == "package":
            with open_package(calbin_path) as package:
                return read_golden(package.read(GOLDEN), "package")
        if golden_path is None:
            raise ValueError("the job names no golden to judge against")
        return read_golden(golden_path.read_bytes(), str(golden_path))
    except (OSError, KeyError, GoldenError, CalbinError) as error:
        raise ValueError(f"the golden cannot be read: {error}") from error


def golden_judgement(result: dict, workdir: Path, golden: GoldenSet, tolerances: dict[str, dict]) -> Judgement:
    """calculet's verdict on a golden stage from the logits the runner measured, against `golden` with the
    job's per-tensor `tolerances`. Every decode step of the golden must have been measured."""
    try:
        measured = _measured_logits(workdir / MEASURED_LOGITS)
    except ValueError as error:
        return Judgement(False, str(error), [finding("no_measurement", str(error))])
    reports, failures = _compared(measured, golden, tolerances, "")
    return _verdict(result, reports, failures, "the measured logits are within tolerance of the golden")


def soak_judgement(
    result: dict, workdir: Path, golden: GoldenSet, tolerances: dict[str, dict], samples: int
) -> Judgement:
    """calculet's verdict on the golden under load: at least `samples` of the soak's responses to the golden's
    request, as the runner measured them while serving the others, each within tolerance of the golden."""
    try:
        measured = _measured_logits(workdir / MEASURED_UNDER_LOAD, {"prefill_logits": 2, "decode_logits": 3})
    except ValueError as error:
        return Judgement(False, str(error), [finding("no_measurement", str(error))])
    count = len(measured["prefill_logits"])
    if count < samples or len(measured["decode_logits"]) != count:
        reason = f"{MEASURED_UNDER_LOAD} holds {count} sampled responses; the soak must check {samples}"
        return Judgement(False, reason, [finding("too_few_samples", reason)])
    reports: dict[str, dict] = {}
    failures: list[str] = []
    for index in range(count):
        sample = {name: measured[name][index].reshape(-1, measured[name].shape[-1]) for name in GOLDEN_TENSORS}
        sample_reports, sample_failures = _compared(sample, golden, tolerances, f"response {index + 1} ")
        reports |= {f"response_{index + 1}.{name}": report for name, report in sample_reports.items()}
        failures += sample_failures
    return _verdict(result, reports, failures, f"{count} sampled responses under load match the golden")


def _compared(
    measured: dict[str, np.ndarray], golden: GoldenSet, tolerances: dict[str, dict], label: str
) -> tuple[dict, list[str]]:
    expected = {"prefill_logits": golden.prefill_logits, "decode_logits": golden.decode_logits}
    reports, failures = {}, []
    for name in GOLDEN_TENSORS:
        if measured[name].shape != expected[name].shape:
            failures.append(
                f"{label}{name}: measured {list(measured[name].shape)}, the golden has {list(expected[name].shape)}"
            )
            continue
        report = compare(expected[name], measured[name], Tolerance.from_dict(tolerances.get(name, {})))
        report["rows"] = row_figures(expected[name], measured[name], report["k"])  # kept with the run, to draw
        reports[name] = report
        failures += [f"{label}{name}: {failure}" for failure in report["failures"]]
    return reports, failures


def _verdict(result: dict, reports: dict, failures: list[str], passed: str) -> Judgement:
    findings = [finding("golden_mismatch", failure, "measurements.golden") for failure in failures]
    if failures and result.get("verdict") == "pass":
        reason = "the runner claims a pass its measured logits do not support — " + "; ".join(failures[:5])
        findings.insert(0, finding("claim_unsupported", reason))
        return Judgement(False, reason, findings, reports)
    if failures:
        return Judgement(False, "; ".join(failures[:5]), findings, reports)
    return Judgement(True, passed, [], reports)
