"""The two stages the worker checks itself: the claim (section 13's six elements, as structured data) and
the versioned artifacts (digests, calbin validation, runner bundles, compatibility with the target)."""

import json
import tarfile
from pathlib import Path

from acceptance import recipes
from acceptance.models import Chain, Target
from acceptance.protocol import StageOutcome
from acceptance.services.inputs import AnswerInputs
from acceptance.stages import FAIL, PASS
from npu_sim import calbin as npu_calbin
from npu_sim import compat as npu_compat
from npu_sim.calbin.layout import VENDOR_FORM
from vendor.claim import ELEMENT_LABELS, RANGE_KEYS, claim_missing, compatibility_specifier
from vendor.models import Artifact
from vendor.services.artifacts import UnsafeArchiveError, archive_check
from vendor.storage import blob_local_path, file_sha256

RUNNER_MANIFEST = "runner.json"


def finding(code: str, field: str, message: str, severity: str = "error") -> dict:
    return {"code": code, "severity": severity, "field": field, "message": message}


def _outcome(findings: list[dict], passed_reason: str, metrics: dict | None = None) -> StageOutcome:
    errors = [f for f in findings if f["severity"] == "error"]
    if not errors:
        return StageOutcome(PASS, passed_reason, findings=findings, metrics=metrics or {})
    summary = "; ".join(f["message"] for f in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return StageOutcome(FAIL, f"{len(errors)} finding(s): {summary}{more}", findings=findings, metrics=metrics or {})


def stage_claim(chain: Chain, inputs: AnswerInputs) -> StageOutcome:
    """Section 13: exactly which of the six elements the answer lacks, and the capability it may move.

    Judged by `vendor.claim.claim_missing`, the same function that sets an answer's `complete`: text
    never stands in for a structured element.
    """
    findings = []
    if chain.capability_id is None:
        linked = sorted(inputs.answer.question.capabilities.values_list("slug", flat=True))
        detail = (
            f"the question links {len(linked)} capabilities ({', '.join(linked)}): the answer must name one"
            if linked
            else "the question links no capability and the answer names none"
        )
        findings.append(finding("capability_unresolved", "capability", f"No capability to move: {detail}."))
    for element in claim_missing(inputs.claim_data()):
        findings.append(finding("element_missing", element, f"Section 13 element missing: {ELEMENT_LABELS[element]}."))
    return _outcome(findings, "all six elements of section 13 are present")


def declared_compatibility(compatibility: dict) -> dict:
    """The answer's declared range in the shape of a calbin manifest's `compatibility` section.

    A bare version ("0.7.6") means exactly that version; a chip value may list several, comma-separated.
    """
    ranges = {}
    for key in RANGE_KEYS:
        value = str(compatibility.get(key, "")).strip()
        ranges[key] = compatibility_specifier(value) if value else None
    chips = [c.strip() for c in str(compatibility.get("chip", "")).split(",") if c.strip()]
    return {"compatibility": {**ranges, "chip": chips}}


def _verify_digest(artifact: Artifact, path: Path) -> list[dict]:
    field = f"artifacts[{artifact.pk}]"
    sha256, size = file_sha256(path)
    found = []
    if sha256 != artifact.declared_sha256 or sha256 != artifact.stored_blob.sha256:
        found.append(
            finding(
                "digest_mismatch",
                field,
                f"{artifact}: stored bytes have sha256 {sha256}, declared {artifact.declared_sha256}.",
            )
        )
    if size != artifact.stored_blob.size or size != artifact.declared_size:
        found.append(
            finding(
                "size_mismatch", field, f"{artifact}: stored bytes are {size} bytes, declared {artifact.declared_size}."
            )
        )
    return found


def runner_bundle_command(manifest_bytes: bytes) -> list[str]:
    """The command a runner bundle declares in runner.json; ValueError when it is malformed."""
    try:
        manifest = json.loads(manifest_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{RUNNER_MANIFEST} is not JSON: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("schema_version") != 1:
        raise ValueError(f"{RUNNER_MANIFEST} must be an object with schema_version 1")
    command = manifest.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(part, str) and part for part in command):
        raise ValueError(f"{RUNNER_MANIFEST} must give command as a non-empty list of strings")
    return command


def _check_runner_bundle(artifact: Artifact, path: Path) -> list[dict]:
    field = f"artifacts[{artifact.pk}]"
    try:
        archive_check(path)
        with tarfile.open(path, "r:*") as archive:
            member = next((m for m in archive if m.name.removeprefix("./") == RUNNER_MANIFEST and m.isfile()), None)
            if member is None:
                return [finding("runner_manifest_missing", field, f"{artifact}: the bundle has no {RUNNER_MANIFEST}.")]
            manifest = archive.extractfile(member)
            if manifest is None:  # a regular file always has a reader; said here for the type checker
                raise ValueError(f"{RUNNER_MANIFEST} cannot be read")
            runner_bundle_command(manifest.read())
    except UnsafeArchiveError as error:
        return [finding("bundle_unsafe", field, f"{artifact}: {error}")]
    except ValueError as error:
        return [finding("runner_manifest_invalid", field, f"{artifact}: {error}")]
    return []


def calbin_check(
    path: Path, label: str, field: str, target_slug: str, target_versions: dict
) -> tuple[list[dict], dict]:
    """A calbin package's findings and facts: the simulator's validator, then (for a simulator-form package) its
    compatibility ranges against the target's versions. `label` names the package in each message."""
    found = [
        finding(f.code, f"{field}.{f.field}" if f.field else field, f"{label}: {f.message}", f.severity)
        for f in npu_calbin.validate(path)
    ]
    if any(f["severity"] == "error" for f in found):
        return found, {}
    manifest = npu_calbin.read_manifest(path)
    # The vendor's own package declares no ranges: the answer's declared range, checked below, is what it runs on.
    if manifest["form"] == VENDOR_FORM:
        return found, {"calbin_form": manifest["form"]}
    for problem in npu_compat.check(manifest, target_versions):
        found.append(finding("target_incompatible", field, f"{label} cannot run on {target_slug}: {problem}."))
    return found, {"calbin_form": manifest["form"], "calbin_compatibility": manifest.get("compatibility", {})}


def _calbin_count_findings(chain: Chain, inputs: AnswerInputs) -> list[dict]:
    """One calbin package, or two when the capability's recipe configures a second model (the first stored is
    the package under test, the other the job's packages.second)."""
    calbins = [a for a in inputs.executable_assets if a.kind == Artifact.CALBIN]
    slug = chain.capability.slug if chain.capability is not None else ""
    recipe = recipes.RECIPES.get(slug)
    wanted = 2 if recipe is not None and recipe.needs_second_package else 1
    if not calbins:
        return [finding("calbin_missing", "executable_assets", "No calbin package among the executable assets.")]
    if len(calbins) < wanted:
        return [
            finding(
                "second_calbin_missing",
                "executable_assets",
                f"{slug} configures a second model beside the package under test: the answer "
                "delivers two calbin packages (the first stored is the one under test).",
            )
        ]
    if len(calbins) > wanted:
        expected = "two (the package under test and the other model)" if wanted == 2 else "one"
        return [
            finding(
                "calbin_ambiguous",
                "executable_assets",
                f"{len(calbins)} calbin packages: an answer for this capability names {expected}.",
            )
        ]
    return []


def stage_artifact(chain: Chain, inputs: AnswerInputs, target: Target, note) -> StageOutcome:
    """Every artifact of the answer re-hashed against its declared digest; calbin packages validated by the
    simulator's validator (its findings become this stage's; a vendor-form package on its static facts);
    runner bundles checked; the calbin's and the answer's compatibility ranges checked against the target the
    chain runs on."""
    findings: list[dict] = []
    metrics: dict = {"artifacts": len(inputs.artifacts)}
    findings += _calbin_count_findings(chain, inputs)
    for artifact in inputs.artifacts:
        field = f"artifacts[{artifact.pk}]"
        if artifact.state != Artifact.VERIFIED or artifact.blob_id is None:
            findings.append(finding("artifact_unverified", field, f"{artifact} is {artifact.state}, not verified."))
            continue
        note(f"verifying {artifact.kind} {artifact} ({artifact.stored_blob.size} bytes)")
        with blob_local_path(artifact.stored_blob) as path:
            digest_findings = _verify_digest(artifact, path)
            findings += digest_findings
            if digest_findings:
                continue
            if artifact.kind == Artifact.CALBIN:
                calbin_findings, calbin_metrics = calbin_check(
                    path, str(artifact), f"artifacts[{artifact.pk}]", target.slug, target.as_job_target()
                )
                findings += calbin_findings
                metrics.update(calbin_metrics)
            elif artifact.kind == Artifact.RUNNER_BUNDLE:
                findings += _check_runner_bundle(artifact, path)
    declared = declared_compatibility(inputs.answer.compatibility)
    target_versions = target.as_job_target()
    for problem in npu_compat.problems(declared, target_versions):
        stated = inputs.answer.compatibility.get(problem.field, "")
        findings.append(
            finding(
                "target_outside_declared_range",
                f"compatibility.{problem.field}",
                f"{target.slug} has {problem.field} {target_versions[problem.field]!r}, outside the answer's "
                f"declared range {stated!r}.",
            )
        )
    return _outcome(findings, f"{len(inputs.artifacts)} artifact(s) verified for {target.slug}", metrics)
