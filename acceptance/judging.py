"""calculet's own verdict on what a runner measured. No ORM here, nothing of Django.

A runner measures; calculet judges. The golden stage's runner must leave the device's logits in the file the
protocol names (`golden-actual.npz`, BF16 bit patterns, `prefill_logits` and `decode_logits`), the soak's the
logits of its sampled golden requests (`soak-golden-actual.npz`, one row of each per request); calculet
compares them with the golden the job named, with the job's tolerances, using its own comparison
(`npu_sim.golden.compare`, which the runner never supplies). The runner's `verdict`, checks and metrics do
not decide: a result that says pass where the measured logits do not is a failure naming the mismatch, and a
result with no measured logits proves nothing.

A package feature is judged by what it computes (`probe_judgements`): an S8 package's measured logits against
calculet's own float model (`FLOAT_MODEL`), never against the package's own dequantised integers, so weights
that lost the model fail however well they match their own golden; a sampling package's draws (the runner's
`sampling-draws.npz`) against the host reference sampler on the device's measured logits, with the recipe's
parameters, so a package that declares sampling and returns the argmax, or samples with another temperature
or top-p, fails.
"""

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from acceptance.limits import GOLDEN_TENSORS
from npu_sim.calbin.findings import CalbinError
from npu_sim.calbin.goldens import GoldenError, GoldenSet, read_golden
from npu_sim.calbin.layout import GOLDEN
from npu_sim.calbin.metadata import read_meta
from npu_sim.calbin.package import open_package
from npu_sim.dtypes import bits_to_float32, to_bf16
from npu_sim.golden import Tolerance, compare, row_figures
from npu_sim.model import PRESETS, ReferenceModel, init_weights
from npu_sim.model.reference import teacher_forced_rows
from npu_sim.probes import PROBES
from npu_sim.sampling import SamplingParams, chi_square_test, reference_probabilities

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
        raise ValueError(f"the package's model config cannot be read: {error}") from error
    if config != PRESETS[preset]:
        raise ValueError(f"the package's model config is not the float model's ({preset}): {config}")
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
        reason = f"s8: {error}"
        return Judgement(False, reason, [finding("no_float_reference", reason, "measurements.vs_float")])
    actual = np.concatenate([measured[name] for name in GOLDEN_TENSORS])
    if actual.shape != expected.shape:
        reason = f"s8: measured {list(actual.shape)} logits, the float model gives {list(expected.shape)}"
        return Judgement(False, reason, [finding("float_mismatch", reason, "measurements.vs_float")])
    limits = Tolerance(
        max_abs=None,
        max_rel=thresholds["max_rel_vs_float"],
        cosine_min=thresholds["cosine_min_vs_float"],
        top1_min=thresholds["top1_min_vs_float"],
        topk_min=0.0,
    )
    report = compare(expected, actual, limits)
    if report["failures"]:
        reason = "s8: against the float model " + "; ".join(report["failures"])
        return Judgement(False, reason, [finding("float_mismatch", reason, "measurements.vs_float")], report)
    return Judgement(True, "s8: the measured logits are within the S8 limits of the float model", [], report)


MEASURED_DRAWS = "sampling-draws.npz"


def _measured_draws(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ValueError(f"the runner wrote no {path.name}: no draws measured to judge")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path.name} is not an .npz file: {error}") from error
    for name in ("draws", "repeat", "golden_sampled"):
        if name not in arrays or arrays[name].ndim != 1 or arrays[name].dtype.kind not in "iu":
            raise ValueError(f"{path.name}: {name} must be a 1-D array of token ids")
    return arrays


def sampling_judgement(workdir: Path, golden: GoldenSet, params: dict) -> Judgement:
    """The device's sampled tokens judged by calculet: `draws` of them (counters 0..draws-1 with the job's seed)
    follow the host reference sampler's distribution on the device's measured prefill logits for the golden's
    prompt (Pearson's chi-square, p-value at least `min_p_value`; no draw outside the reference's support),
    drawn again they are the same tokens, and the tokens sampled on the golden's request are the golden's."""
    try:
        measured = _measured_draws(workdir / MEASURED_DRAWS)
        row = bits_to_float32(_measured_logits(workdir / MEASURED_LOGITS)["prefill_logits"])[0]
    except ValueError as error:
        reason = f"sampling: {error}"
        return Judgement(False, reason, [finding("no_measurement", reason, "measurements.sampling")])
    drawn, repeat, draws = measured["draws"], measured["repeat"], params["draws"]
    sampler = SamplingParams(params["temperature"], params["top_k"], params["top_p"], params["seed"])
    failures = []
    if len(drawn) != draws or (len(drawn) and not 0 <= drawn.min() <= drawn.max() < len(row)):
        failures.append(f"{len(drawn)} draws measured, {draws} token ids in 0..{len(row) - 1} asked for")
        fit = None
    else:
        probabilities, boundary = reference_probabilities(row, sampler)
        fit = chi_square_test(drawn, probabilities, boundary)
        if not fit.p_value >= params["min_p_value"]:
            failures.append(
                f"chi-square {fit.statistic:.1f} on {fit.dof} degrees of freedom over {draws} draws against the "
                f"reference sampler ({sampler.as_dict()}): p = {fit.p_value:.3g} < {params['min_p_value']}"
            )
        if fit.outside_support:
            failures.append(f"{fit.outside_support} draws of tokens the reference sampler never draws")
    if not np.array_equal(drawn, repeat):
        differ = int(np.count_nonzero(drawn != repeat)) if drawn.shape == repeat.shape else len(drawn)
        failures.append(f"drawn again with seed {sampler.seed}, {differ} of {len(drawn)} tokens differ")
    if golden.sampled is None:
        failures.append(f"the golden ({golden.source}) holds no sampled tokens to compare")
    elif measured["golden_sampled"].tolist() != golden.sampled.token_ids.tolist():
        failures.append(
            f"on the golden's request the device sampled {measured['golden_sampled'].tolist()}, "
            f"the golden {golden.sampled.token_ids.tolist()}"
        )
    figures = fit.as_dict() if fit is not None else {}
    if failures:
        reason = "sampling: " + "; ".join(failures)
        return Judgement(False, reason, [finding("sampling_mismatch", reason, "measurements.sampling")], figures)
    return Judgement(True, "sampling: the device's draws follow the reference sampler and repeat", [], figures)
