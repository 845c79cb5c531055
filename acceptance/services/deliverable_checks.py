"""Static checks of the artifacts an answer delivers for an sdk, container_image, schema, onnx or tool deliverable,
run by a worker (`acceptance.deliverable_check`): the findings become evidence (E2 for an SDK's headers
and same-version symbols, E1 for an image or a schema checked against the current artifacts) and decide
the deliverable — accepted when nothing is found and the answer is complete, rejected with the findings.

What an answer carries, by deliverable kind (docs/acceptance.md, "Static checks"):
- sdk: an artifact of kind `sdk`, a tar holding `include/` (the headers), `lib/` (one shared library, other
  names of it as links to it: `libcalrt.so -> libcalrt.so.0 -> libcalrt.so.0.7.6`; its file name, soname and
  the headers' version macro must say the answer's version),
  optionally `example/` (one C or C++ source: the minimal example, built against them where a compiler is)
  and `entry_points.txt` (one call a line: the calls the answer declares, checked with those of the
  capabilities' recipes — the only ones for a capability whose recipe names none; `role = call` names the
  call of a role the recipe asks for without the seed naming it, V23's cancel and time-out). A passing SDK is also
  evidence (E2) for every other capability whose recipe's calls it carries, declared and defined: the
  capability's SDK entry points present in the delivered SDK of that version, as the promotion policy asks.
- container_image: an artifact of kind `container_image`, the OCI image layout as a tar, SBOM and licence in it;
  where the answer delivers its build — the minimal example as a build context (a tar, or one file) with
  `outputs.txt` naming what the build writes, and the build command as the example's command — the build runs
  twice in fresh sandboxes and must write the same bytes (V03), and what it writes must be the delivery: the
  image's config and layers, or the files of a calbin package the answer delivers beside it, by digest. A
  capability whose recipe is about a build (`reproducible_build`) is proven only so: an image answer without its
  build is rejected.
- schema: an artifact of kind `schema`, the JSON Schema as a JSON file; for a trace (V37) a tar of the schema of
  the vendor's own trace format, a sample trace in it, where its events keep their times (`fields.json`) and the
  converter calculet runs to a Chrome trace, whose events' threads, times and nesting are compared with the
  sample's (acceptance/inspection/trace.py). A package-metadata schema is held to the fix its question asks
  (`Deliverable.schema_asks`, acceptance/inspection/schema.py).
- container_image, V01 (`Deliverable.image_commits`): the image holds the compiler and its SBOM gives calcc and
  TVM at the seed's commits (acceptance/inspection/oci.py).
- onnx: an artifact of kind `onnx`, the model file; it must be an ONNX model whose SHA-256 begins with the seed's
  hash (`Deliverable.sha256_prefix`, V04: C02's 316f06…) and whose weights have the seed's model's shapes
  (acceptance/inspection/onnx.py).
- tool: an artifact of kind `tool`, a tar holding `run.txt` (the command) and what it runs; calculet runs it in
  the sandbox on inputs it makes (`Deliverable.tool_runs_on` "onnx": V05's checker must accept a valid model
  and refuse invalid ones, acceptance/inspection/onnx.py).
"""

import json
import tarfile
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from acceptance.inspection import Report
from acceptance.inspection.delivered import Delivered, archive_parts, check_built_is_delivered, image_parts
from acceptance.inspection.isolated import DEFAULT_LIMITS
from acceptance.inspection.oci import ImageReport, check_oci_archive
from acceptance.inspection.onnx import check_onnx_checker, check_onnx_file
from acceptance.inspection.reproduce import reproduce
from acceptance.inspection.schema import check_schema
from acceptance.inspection.sdk import C_SUFFIXES, CXX_SUFFIXES, build_example, check_sdk, sdk_library
from acceptance.inspection.trace import check_trace_delivery
from acceptance.recipes import RECIPES, Recipe
from acceptance.services.dispatch import deliverable_check_send
from calculet.actors import SYSTEM
from calculet.errors import DomainError
from calculet.json_text import storable_json_loads
from evidence.models import Capability, EvidenceItem
from evidence.services import evidence_record
from vendor.models import Answer, Artifact, Deliverable
from vendor.services.artifacts import UnsafeArchiveError, archive_extract, example_unpack
from vendor.services.deliverables import deliverable_accept, deliverable_lock, deliverable_reject
from vendor.storage import blob_local_path

CHECKED_KINDS = {
    Deliverable.SDK: Artifact.SDK,
    Deliverable.CONTAINER_IMAGE: Artifact.CONTAINER_IMAGE,
    Deliverable.SCHEMA: Artifact.SCHEMA,
    Deliverable.ONNX: Artifact.ONNX,
    Deliverable.TOOL: Artifact.TOOL,
}
GRADES = {
    Deliverable.SDK: "E2",
    Deliverable.CONTAINER_IMAGE: "E1",
    Deliverable.SCHEMA: "E1",
    Deliverable.ONNX: "E1",
    Deliverable.TOOL: "E1",
}
MAX_SCHEMA_BYTES = 4 * 1024 * 1024
SCHEMA_MAX_DEPTH = 64
# Reported, never a failure: the seed asks for the example to build "where a compiler is present".
NOT_FAILING = {"compiler_missing"}
# A check still owed this long after its answer was stored lost its message (a broker flush, no worker) and is
# sent again. Longer than the task's 16-minute time limit (acceptance.tasks), so a check is seldom sent again
# while it runs; when it is, the second finds it done.
CHECK_RESEND_AFTER = timedelta(minutes=30)


@dataclass
class CheckOutcome:
    passed: bool
    summary: str
    findings: list[str]
    checked: dict
    versions: dict
    also_proves: list[str] = field(default_factory=list)  # capability slugs beyond the deliverable's own


def deliverable_check_wanted(answer: Answer) -> bool:
    """Whether the answer names a deliverable that a static check decides."""
    return answer.deliverable is not None and answer.deliverable.kind in CHECKED_KINDS


def _owing_a_check(answers: QuerySet[Answer]) -> QuerySet[Answer]:
    """Those of `answers` whose check is still to be done: each names a deliverable of a checked kind, is the
    newest answer of its organisation for it (a newer one's check decides instead), and no check evidence
    names it yet."""
    newer = Answer.objects.filter(
        deliverable=OuterRef("deliverable"), organisation=OuterRef("organisation"), pk__gt=OuterRef("pk")
    )
    checked = EvidenceItem.objects.filter(origin=EvidenceItem.CHECK, answer=OuterRef("pk"))
    return answers.filter(deliverable__kind__in=CHECKED_KINDS).filter(~Exists(newer), ~Exists(checked))


def deliverable_checks_resend(*, now: datetime | None = None) -> int:
    """Send again the check of every answer still owing one CHECK_RESEND_AFTER after it was stored (its
    message was lost); returns how many. A check still running meanwhile is harmless: the first to record
    its evidence decides, the other finds it done."""
    cutoff = (now or timezone.now()) - CHECK_RESEND_AFTER
    overdue = _owing_a_check(Answer.objects.filter(created_at__lte=cutoff))
    answer_ids = list(overdue.order_by("pk").values_list("pk", flat=True))
    for answer_id in answer_ids:
        deliverable_check_send(answer_id)
    return len(answer_ids)


def deliverable_check_answer(answer_id: int) -> Deliverable | None:
    """Check the artifacts of the answer for its deliverable, record the evidence and decide the deliverable.

    Does nothing (returns None) when the answer names no checked deliverable, when a newer answer for the
    same deliverable exists (its own check decides), or when its check has already recorded its evidence (a
    message sent twice). Otherwise the deliverable is accepted when the check finds nothing and the answer is
    complete, rejected with the findings as the reason.
    """
    answer = Answer.objects.select_related("deliverable", "question", "organisation").get(pk=answer_id)
    deliverable = answer.deliverable
    owing = _owing_a_check(Answer.objects.filter(pk=answer_id))
    if deliverable is None or not owing.exists():
        return None
    outcome = _check(answer, deliverable)
    if not answer.complete:
        outcome.findings.append(f"the answer is incomplete: it lacks {', '.join(answer.missing)} (section 13)")
        outcome.passed = False
    question = answer.question
    verdict = "passed" if outcome.passed else "failed"
    reason = (
        f"Static check of answer r{answer.revision} {verdict}: {outcome.summary}"
        if outcome.passed
        else f"Static check of answer r{answer.revision} failed: {'; '.join(outcome.findings)}"
    )
    with transaction.atomic():
        locked = deliverable_lock(deliverable)  # the lock order: question and deliverable before the audit head
        if not owing.exists():  # while this one ran, another message checked the answer or a newer one came
            return None
        evidence_record(
            origin=EvidenceItem.CHECK,
            grade=GRADES[deliverable.kind],
            conclusion=f"{question.code} {deliverable.key}: static check {verdict}. {outcome.summary}",
            organisation=answer.organisation,
            capabilities=list(
                Capability.objects.filter(
                    Q(deliverables=deliverable) | Q(slug__in=outcome.also_proves if outcome.passed else [])
                ).distinct()
            ),
            versions=outcome.versions,
            deliverable=deliverable,
            answer=answer,
            code_prefix=f"CHK-{deliverable.kind.upper().replace('_', '-')}",
            source_text=f"static check of answer {answer.pk} (r{answer.revision}) of {answer.organisation.slug}",
            explanation="; ".join(outcome.findings) or outcome.summary,
            # Through JSON and back: what the checks looked at may name paths, stored as their text.
            detail=json.loads(json.dumps({"findings": outcome.findings, "checked": outcome.checked}, default=str)),
        )
        if answer.organisation_id != locked.question.organisation_id:
            return None  # the question was put to another organisation meanwhile: this answer decides nothing
        if outcome.passed:
            return deliverable_accept(deliverable, actor=SYSTEM, reason=reason, answer=answer)
        return deliverable_reject(deliverable, actor=SYSTEM, reason=reason, answer=answer)


def _artifact(answer: Answer, deliverable: Deliverable) -> Artifact | None:
    wanted = CHECKED_KINDS[deliverable.kind]
    return answer.executable_assets.filter(kind=wanted, state=Artifact.VERIFIED).order_by("pk").first()


def _check(answer: Answer, deliverable: Deliverable) -> CheckOutcome:
    artifact = _artifact(answer, deliverable)
    if artifact is None:
        kind = CHECKED_KINDS[deliverable.kind]
        return CheckOutcome(False, "nothing to check", [f"the answer delivers no verified {kind} artifact"], {}, {})
    with (
        tempfile.TemporaryDirectory(prefix="calculet-check-") as scratch,
        blob_local_path(artifact.stored_blob) as path,
    ):
        if deliverable.kind == Deliverable.SDK:
            return _check_sdk(path, Path(scratch), answer, deliverable, artifact)
        if deliverable.kind == Deliverable.CONTAINER_IMAGE:
            image = check_oci_archive(
                path, components=deliverable.image_sbom_components, commits=deliverable.image_commits
            )
            build = _reproduce_build(answer, deliverable, Path(scratch), _delivered(answer, artifact, image))
            what = f"image {artifact.file_name} {artifact.version}" + (", built twice" if build is not None else "")
            return _outcome(image, what, extra=build)
        if deliverable.kind == Deliverable.ONNX:
            what = f"ONNX {artifact.file_name} {artifact.version}"
            return _outcome(check_onnx_file(path, sha256_prefix=deliverable.sha256_prefix), what)
        if deliverable.kind == Deliverable.TOOL:
            return _check_tool(path, Path(scratch), deliverable, artifact)
        if deliverable.schema_of == "trace":
            return _check_trace(path, Path(scratch), artifact)
        return _check_schema(path, deliverable, artifact)


def _outcome(report: Report, what: str, *, versions: dict | None = None, extra: Report | None = None) -> CheckOutcome:
    findings = [finding.message for finding in report.findings]
    checked = {"report": report.as_dict()}
    failing = [finding for finding in report.findings if finding.code not in NOT_FAILING]
    if extra is not None:
        findings += [finding.message for finding in extra.findings]
        checked["build"] = extra.as_dict()
        failing += [finding for finding in extra.findings if finding.code not in NOT_FAILING]
    summary = f"{what}: nothing found" if not findings else f"{what}: {len(findings)} findings"
    return CheckOutcome(not failing, summary, findings, checked, versions or {})


MAX_DECLARED_ENTRY_POINTS = 500
MAX_BUILD_OUTPUTS = 100
# Both builds end within the check task's soft time limit (900 s, acceptance.tasks) with time left for the
# image: a build that takes longer fails with the sandbox's reason rather than the task being cut off
# undecided (and sent again).
BUILD_LIMITS = replace(DEFAULT_LIMITS, wall_seconds=360)


def _delivered(answer: Answer, image_artifact: Artifact, image: ImageReport) -> list[Delivered]:
    """What the answer's build may write to prove it builds the delivery: the image (its config and layers), or
    a package the answer delivers beside it (its files), as V03's compile writes the package."""
    delivered = [Delivered(f"the delivered image {image_artifact}", image_artifact.stored_blob.sha256)]
    delivered[0].parts.update(image_parts(image.images))
    packages = answer.executable_assets.filter(kind=Artifact.CALBIN, state=Artifact.VERIFIED).order_by("pk")
    for package in packages:
        with blob_local_path(package.stored_blob) as path:
            parts = archive_parts(path) if tarfile.is_tarfile(path) else {}
        delivered.append(Delivered(f"the delivered package {package}", package.stored_blob.sha256, parts))
    return delivered


def _reproduce_build(
    answer: Answer, deliverable: Deliverable, scratch: Path, delivered: list[Delivered]
) -> Report | None:
    """V03: the answer's build — its minimal example delivered as a build context, run with its command — twice
    in fresh sandboxes, the outputs `outputs.txt` names compared byte for byte, and the first build's outputs
    must hold one of the `delivered` artifacts by digest. None when the answer delivers no build and none of
    the deliverable's capabilities is about one."""
    artifact = answer.minimal_example_artifact
    command = answer.minimal_example_command.strip()
    if artifact is None or not command:
        if not any(recipe.reproducible_build for recipe in _recipes(deliverable)):
            return None
        report = Report()
        report.add(
            "build_missing",
            "the answer must deliver its build to prove it reproducible: the build context (a tar with outputs.txt "
            "naming what the build writes) as its minimal example, and the build command as the example's command",
        )
        return report
    context = scratch / "build"
    context.mkdir()
    try:
        example_unpack(artifact, context)
    except (UnsafeArchiveError, DomainError) as error:
        report = Report()
        report.add("build_context_unsafe", f"the build context cannot be unpacked: {error}")
        return report
    outputs = _listed(context / "outputs.txt", MAX_BUILD_OUTPUTS)
    built = scratch / "built"
    built.mkdir()
    report = reproduce(command, context, outputs, limits=BUILD_LIMITS, keep=built)
    if report.passed:
        compared = check_built_is_delivered(built, delivered)
        report.findings += compared.findings
        report.checked["delivered"] = compared.checked
    return report


def _listed(path: Path, limit: int) -> list[str]:
    """What a delivery lists in a text file, one entry a line (blank lines and # comments skipped), at most
    `limit` lines read; nothing when there is no such file."""
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()[:limit]
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _recipes(deliverable: Deliverable) -> list[Recipe]:
    """The proof recipes of the deliverable's capabilities (a capability without one has nothing to add)."""
    slugs = deliverable.capabilities.order_by("position", "slug").values_list("slug", flat=True)
    return [RECIPES[slug] for slug in slugs if slug in RECIPES]


def _declared(declared_file: Path) -> tuple[list[str], dict[str, str]]:
    """What the delivery's entry_points.txt declares: the calls, and the call it names for each role
    (`cancel = VirtualDevice::CancelJob`)."""
    calls: list[str] = []
    roles: dict[str, str] = {}
    for line in _listed(declared_file, MAX_DECLARED_ENTRY_POINTS):
        role, named, call = (part.strip() for part in line.partition("="))
        if named:
            roles[role] = call
        calls.append(call if named else line)
    return calls, roles


def _entry_points(deliverable: Deliverable, declared_file: Path) -> list[str]:
    """The recipes' entry points of the deliverable's capabilities, then those the delivery declares."""
    points: list[str] = []
    for recipe in _recipes(deliverable):
        points += [point for point in recipe.sdk_entry_points if point not in points]
    declared, _ = _declared(declared_file)
    points += [point for point in declared if point and point not in points]
    return points


def _check_roles(report: Report, deliverable: Deliverable, declared_file: Path) -> None:
    """Each role the recipes ask for (a call the seed does not name) has its call named in entry_points.txt;
    the named calls are checked with the others, declared in the headers and defined in the library."""
    _, named = _declared(declared_file)
    for recipe in _recipes(deliverable):
        for role, meaning in recipe.sdk_roles:
            if not named.get(role):
                report.add(
                    "sdk_role_not_named",
                    f"the SDK names no call for {role} ({meaning}) in entry_points.txt (`{role} = <call>`), "
                    f"which {recipe.capability} needs",
                    role=role,
                )


def _check_sdk(path: Path, scratch: Path, answer: Answer, deliverable: Deliverable, artifact: Artifact) -> CheckOutcome:
    what = f"SDK {artifact.file_name} {artifact.version}"
    try:
        archive_extract(path, scratch)
    except (UnsafeArchiveError, DomainError) as error:
        return CheckOutcome(False, what, [f"the SDK archive cannot be unpacked: {error}"], {}, {})
    try:
        if not (scratch / "include").is_dir():
            raise ValueError("the SDK archive must hold include/ (the headers)")
        library = sdk_library(scratch / "lib")
    except ValueError as error:
        in_lib = sorted(p.name for p in (scratch / "lib").iterdir()) if (scratch / "lib").is_dir() else []
        return CheckOutcome(False, what, [str(error)], {"lib": in_lib}, {})
    others = _other_recipes_with_calls(deliverable)
    report = check_sdk(
        scratch / "include",
        library,
        _entry_points(deliverable, scratch / "entry_points.txt"),
        version=answer.version,
        also_look_for=[point for recipe in others for point in recipe.sdk_entry_points],
    )
    _check_roles(report, deliverable, scratch / "entry_points.txt")
    sources = (
        sorted(p for p in (scratch / "example").glob("*") if p.suffix.lower() in C_SUFFIXES | CXX_SUFFIXES)
        if (scratch / "example").is_dir()
        else []
    )
    build = build_example(scratch / "include", library, sources[0]) if sources else None
    # Only a check that passed names its version: then file name, soname, headers and answer all say it.
    versions = {"calrt": report.library_version} if report.passed and report.library_version else {}
    outcome = _outcome(report, what, versions=versions, extra=build)
    found = report.entry_points
    outcome.checked["calls"] = found  # each call looked for: the header declaring it and its symbol, or None
    outcome.also_proves = [
        recipe.capability
        for recipe in others
        if all(
            point in found and found[point]["declared_in"] and found[point]["symbol"]
            for point in recipe.sdk_entry_points
        )
    ]
    return outcome


def _other_recipes_with_calls(deliverable: Deliverable) -> list[Recipe]:
    """The recipes, beyond the deliverable's own capabilities', that name SDK entry points: a passing SDK that
    carries all of one's calls, declared and defined, is evidence for that capability too (looked up in the
    same read of the headers and the library)."""
    own = set(deliverable.capabilities.values_list("slug", flat=True))
    return [recipe for slug, recipe in RECIPES.items() if slug not in own and recipe.sdk_entry_points]


def _check_trace(path: Path, scratch: Path, artifact: Artifact) -> CheckOutcome:
    what = f"trace schema, sample and converter {artifact.file_name} {artifact.version}"
    try:
        archive_extract(path, scratch)
    except (UnsafeArchiveError, DomainError) as error:
        return CheckOutcome(False, what, [f"the trace delivery cannot be unpacked: {error}"], {}, {})
    return _outcome(check_trace_delivery(scratch), what)


def _check_tool(path: Path, scratch: Path, deliverable: Deliverable, artifact: Artifact) -> CheckOutcome:
    what = f"{deliverable.tool_runs_on} checker {artifact.file_name} {artifact.version}"
    try:
        archive_extract(path, scratch)
    except (UnsafeArchiveError, DomainError) as error:
        return CheckOutcome(False, what, [f"the tool's delivery cannot be unpacked: {error}"], {}, {})
    return _outcome(check_onnx_checker(scratch), what)


def _check_schema(path: Path, deliverable: Deliverable, artifact: Artifact) -> CheckOutcome:
    what = f"schema {artifact.file_name} {artifact.version} of {deliverable.schema_of}"
    if path.stat().st_size > MAX_SCHEMA_BYTES:
        return CheckOutcome(False, what, [f"the schema is larger than {MAX_SCHEMA_BYTES} bytes"], {}, {})
    try:
        # Strictly: a key given twice is read one way here and maybe the other by the vendor's validator, and NaN is
        # no JSON number.
        schema = storable_json_loads(path.read_bytes(), max_depth=SCHEMA_MAX_DEPTH)
    except (ValueError, UnicodeDecodeError) as error:
        return CheckOutcome(False, what, [f"the schema is not JSON: {error}"], {}, {})
    return _outcome(check_schema(schema, deliverable.schema_of, asks=deliverable.schema_asks), what)
