"""Vendor answers: one immutable revision per submission, judged by section 13's closing rule."""

import math
import re

from django.db import transaction
from django.db.models import Max

from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import DomainError, ForbiddenError, NotFoundError
from vendor import events, states
from vendor.access import user_membership
from vendor.claim import COMPATIBILITY_KEYS, VERSION_PATTERN, ClaimData, claim_missing
from vendor.models import Answer, Artifact, Deliverable, Membership, Organisation, Question
from vendor.services.notifications import notify_on_commit
from vendor.services.questions import question_state_move

ANSWER_FIELDS = {
    "deliverable",
    "summary",
    "version",
    "executable_assets",
    "minimal_example",
    "error_paths",
    "golden",
    "compatibility",
    "thresholds",
}
EXECUTABLE_KINDS = {Artifact.CALBIN, Artifact.SDK, Artifact.CONTAINER_IMAGE, Artifact.RUNNER_BUNDLE, Artifact.SCHEMA}
# Input limits, for the service and the API's schema alike.
MAX_TEXT = 20_000
MAX_VERSION = 100
MAX_COMMAND = 4000
MAX_ERROR_PATH_TEXT = 2000
MAX_COMPATIBILITY = 200
ERROR_CODE_RANGE = (-(2**31), 2**31 - 1)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
NAME_RULE = "Names are 1–100 letters, digits, '_', '.' or '-'."
MAX_LIST = 100


def _text(data: dict, name: str, *, field: str | None = None, limit: int = MAX_TEXT) -> str:
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DomainError("Must be a string.", field=field or name)
    if len(value) > limit:
        raise DomainError(f"At most {limit} characters.", field=field or name)
    return value.strip()


def _mapping(value, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DomainError("Must be an object.", field=field)
    return value


def _id_list(value, field: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DomainError("Must be a list of artifact ids.", field=field)
    if len(value) > MAX_LIST:
        raise DomainError(f"At most {MAX_LIST} artifacts.", field=field)
    return value


def _artifact(organisation: Organisation, artifact_id, field: str, kinds: set[str] | None) -> Artifact:
    """One of the organisation's verified artifacts; another organisation's id is "not found"."""
    if isinstance(artifact_id, bool) or not isinstance(artifact_id, int):
        raise DomainError("Must be an artifact id (an integer).", field=field)
    artifact = Artifact.objects.filter(pk=artifact_id, organisation=organisation).first()
    if artifact is None:
        raise DomainError(f"Artifact {artifact_id} not found.", field=field, code="not_found")
    if artifact.state != Artifact.VERIFIED:
        raise DomainError(f"Artifact {artifact_id} is {artifact.state}, not verified.", field=field)
    if kinds is not None and artifact.kind not in kinds:
        raise DomainError(
            f"Artifact {artifact_id} is a {artifact.kind}; expected one of: {', '.join(sorted(kinds))}.", field=field
        )
    return artifact


def _artifacts(organisation, ids: list, field: str, kinds: set[str] | None) -> list[Artifact]:
    found = [_artifact(organisation, value, f"{field}[{index}]", kinds) for index, value in enumerate(ids)]
    return list({artifact.pk: artifact for artifact in found}.values())


def _error_paths(value) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DomainError("Must be a list of {scenario, expect_code}.", field="error_paths")
    if len(value) > MAX_LIST:
        raise DomainError(f"At most {MAX_LIST} error paths.", field="error_paths")
    paths = []
    for index, item in enumerate(value):
        field = f"error_paths[{index}]"
        if not isinstance(item, dict):
            raise DomainError("Must be an object with scenario and expect_code.", field=field)
        unknown = sorted(set(item) - {"scenario", "expect_code", "recovery"})
        if unknown:
            raise DomainError(f"Unknown key {unknown[0]}.", field=f"{field}.{unknown[0]}")
        scenario = _text(item, "scenario", field=f"{field}.scenario", limit=MAX_ERROR_PATH_TEXT)
        if not scenario:
            raise DomainError("Describe the scenario.", field=f"{field}.scenario")
        code = item.get("expect_code")
        lowest, highest = ERROR_CODE_RANGE
        if isinstance(code, bool) or not isinstance(code, int) or not lowest <= code <= highest:
            raise DomainError("Must be the integer error code the scenario returns.", field=f"{field}.expect_code")
        path = {"scenario": scenario, "expect_code": code}
        recovery = _text(item, "recovery", field=f"{field}.recovery", limit=MAX_ERROR_PATH_TEXT)
        if recovery:
            path["recovery"] = recovery
        paths.append(path)
    return paths


def _tolerances(value) -> dict:
    tolerances = _mapping(value, "golden.tolerances")
    cleaned = {}
    for name, number in tolerances.items():
        if not NAME_PATTERN.match(name):
            raise DomainError(NAME_RULE, field="golden.tolerances")
        field = f"golden.tolerances.{name}"
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) or number < 0:
            raise DomainError("Must be a non-negative number.", field=field)
        cleaned[name] = number
    return cleaned


def _compatibility(value) -> dict:
    compatibility = _mapping(value, "compatibility")
    unknown = sorted(set(compatibility) - set(COMPATIBILITY_KEYS))
    if unknown:
        raise DomainError(
            f"Unknown key {unknown[0]}; the keys are {', '.join(COMPATIBILITY_KEYS)}.",
            field=f"compatibility.{unknown[0]}",
        )
    return {
        key: _text(compatibility, key, field=f"compatibility.{key}", limit=MAX_COMPATIBILITY)
        for key in COMPATIBILITY_KEYS
        if _text(compatibility, key, field=f"compatibility.{key}", limit=MAX_COMPATIBILITY)
    }


def _thresholds(value) -> dict:
    thresholds = _mapping(value, "thresholds")
    for name, number in thresholds.items():
        if not NAME_PATTERN.match(name):
            raise DomainError(NAME_RULE, field="thresholds")
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise DomainError("Must be a number.", field=f"thresholds.{name}")
    return thresholds


def _deliverable(question: Question, key) -> Deliverable:
    """The deliverable an answer names by its key; the question's only one when it names none."""
    deliverables = list(question.deliverables.order_by("position", "key"))
    keys = ", ".join(d.key for d in deliverables)
    if key is None or key == "":
        if len(deliverables) == 1:
            return deliverables[0]
        if not deliverables:
            raise DomainError(f"{question.code} has no deliverable to answer.", field="deliverable")
        raise DomainError(
            f"Name the deliverable this answer delivers: {question.code} has several ({keys}).", field="deliverable"
        )
    if not isinstance(key, str):
        raise DomainError("Must be a deliverable key.", field="deliverable")
    for deliverable in deliverables:
        if deliverable.key == key:
            return deliverable
    raise DomainError(
        f"{question.code} has no deliverable {key!r}; one of: {keys or 'none'}.", field="deliverable", code="not_found"
    )


def answer_store(*, actor, question: Question, data: dict) -> Answer:
    """Store a new revision of the actor's organisation's answer to `question`.

    Preconditions: the actor is a vendor engineer of the organisation the question is put to (otherwise
    the question is "not found"); `deliverable` is the key of one of the question's deliverables (it may be
    left out when the question has only one); every artifact id is one of that organisation's verified artifacts
    (another organisation's id is "not found", naming the field); the version, if given, is a version
    number. `complete` and `missing` come from section 13's rule (`vendor.claim.claim_missing`).
    A question that was asked moves to answered. Bad input raises DomainError naming the field and stores
    nothing. `acceptance.services.answer_submit` calls this and starts the answer's chains.
    """
    membership = user_membership(actor)
    if membership is None or membership.role != Membership.VENDOR:
        raise ForbiddenError("Only a vendor engineer answers questions.")
    organisation = membership.organisation
    if question.organisation_id != organisation.pk:
        raise NotFoundError(f"Question {question.code} not found.")
    if not isinstance(data, dict):
        raise DomainError("The answer must be an object.")
    unknown = sorted(set(data) - ANSWER_FIELDS)
    if unknown:
        raise DomainError(f"Unknown field {unknown[0]}.", field=unknown[0])

    deliverable = _deliverable(question, data.get("deliverable"))
    summary = _text(data, "summary")
    version = _text(data, "version", limit=MAX_VERSION)
    if version and not VERSION_PATTERN.match(version):
        raise DomainError("A version looks like 1.2 or v0.7.6-rc1.", field="version")
    executable_assets = _artifacts(
        organisation,
        _id_list(data.get("executable_assets"), "executable_assets"),
        "executable_assets",
        EXECUTABLE_KINDS,
    )
    example = _mapping(data.get("minimal_example"), "minimal_example")
    unknown = sorted(set(example) - {"artifact", "command", "description"})
    if unknown:
        raise DomainError(f"Unknown key {unknown[0]}.", field=f"minimal_example.{unknown[0]}")
    example_artifact = None
    if example.get("artifact") is not None:
        example_artifact = _artifact(
            organisation,
            example["artifact"],
            "minimal_example.artifact",
            set(dict(Artifact.KINDS)) - {Artifact.DOCUMENT},
        )
    example_command = _text(example, "command", field="minimal_example.command", limit=MAX_COMMAND)
    example_description = _text(example, "description", field="minimal_example.description")
    error_paths = _error_paths(data.get("error_paths"))
    golden = _mapping(data.get("golden"), "golden")
    unknown = sorted(set(golden) - {"artifacts", "tolerances"})
    if unknown:
        raise DomainError(f"Unknown key {unknown[0]}.", field=f"golden.{unknown[0]}")
    golden_artifacts = _artifacts(
        organisation, _id_list(golden.get("artifacts"), "golden.artifacts"), "golden.artifacts", {Artifact.GOLDEN}
    )
    tolerances = _tolerances(golden.get("tolerances"))
    compatibility = _compatibility(data.get("compatibility"))
    thresholds = _thresholds(data.get("thresholds"))

    missing = claim_missing(
        ClaimData(
            version=version,
            executable_asset_ids=[artifact.pk for artifact in executable_assets],
            minimal_example_artifact_id=example_artifact.pk if example_artifact else None,
            minimal_example_command=example_command,
            error_paths=error_paths,
            golden_artifact_ids=[artifact.pk for artifact in golden_artifacts],
            golden_tolerances=tolerances,
            compatibility=compatibility,
        )
    )
    with transaction.atomic():
        locked = lock_rows(Question.objects).get(pk=question.pk)
        if locked.organisation_id != organisation.pk:
            raise NotFoundError(f"Question {question.code} not found.")
        latest = Answer.objects.filter(question=locked, organisation=organisation).aggregate(top=Max("revision"))
        answer = Answer.objects.create(
            question=locked,
            deliverable=deliverable,
            organisation=organisation,
            revision=(latest["top"] or 0) + 1,
            author=actor,
            summary=summary,
            version=version,
            minimal_example_artifact=example_artifact,
            minimal_example_command=example_command,
            minimal_example_description=example_description,
            error_paths=error_paths,
            golden_tolerances=tolerances,
            compatibility=compatibility,
            thresholds=thresholds,
            complete=not missing,
            missing=missing,
        )
        answer.executable_assets.set(executable_assets)
        answer.golden_artifacts.set(golden_artifacts)
        audit_record(actor=actor, action="answer.submit", obj=answer, after=answer_snapshot(answer))
        notify_on_commit(
            events.ANSWERED,
            actor=actor,
            organisation_id=organisation.pk,
            question_id=locked.pk,
            data={
                "organisation": organisation.name,
                "revision": answer.revision,
                "detail": summary[:500],
                "path": f"/questions/{locked.code}/#answer-{answer.pk}",
            },
        )
        # A question being verified stays so: the chains already running verify their deliverables whatever
        # a new revision (an incomplete one for another deliverable, say) says.
        if locked.state != states.VERIFYING and states.can_transition(locked.state, states.ANSWERED):
            question_state_move(
                actor=actor, question=locked, state=states.ANSWERED, reason=f"answer r{answer.revision}"
            )
    return answer


def answer_snapshot(answer: Answer) -> dict:
    """The answer's content as stored, for the audit log."""
    return {
        "question": answer.question.code,
        "deliverable": answer.deliverable.key if answer.deliverable else None,
        "organisation": answer.organisation.slug,
        "revision": answer.revision,
        "summary": answer.summary,
        "version": answer.version,
        "executable_assets": sorted(answer.executable_assets.values_list("pk", flat=True)),
        "minimal_example": {
            "artifact": answer.minimal_example_artifact_id,
            "command": answer.minimal_example_command,
            "description": answer.minimal_example_description,
        },
        "error_paths": answer.error_paths,
        "golden": {
            "artifacts": sorted(answer.golden_artifacts.values_list("pk", flat=True)),
            "tolerances": answer.golden_tolerances,
        },
        "compatibility": answer.compatibility,
        "thresholds": answer.thresholds,
        "complete": answer.complete,
        "missing": answer.missing,
    }
