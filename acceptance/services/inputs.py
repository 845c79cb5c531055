"""What each stage of a chain runs on: the answer's structured fields, its artifact versions, the target's
versions, and the digests that tell a run on current inputs from a stale one."""

import contextlib
import hashlib
import json
from dataclasses import dataclass

from acceptance import protocol, recipes, stages
from acceptance.models import Target
from vendor.claim import ClaimData
from vendor.models import Answer, Artifact


@dataclass
class AnswerInputs:
    answer: Answer
    executable_assets: list[Artifact]
    golden_artifacts: list[Artifact]
    minimal_example_artifact: Artifact | None

    @property
    def artifacts(self) -> list[Artifact]:
        found = {a.pk: a for a in [*self.executable_assets, *self.golden_artifacts]}
        if self.minimal_example_artifact is not None:
            found[self.minimal_example_artifact.pk] = self.minimal_example_artifact
        return sorted(found.values(), key=lambda a: a.pk)

    def claim_data(self) -> ClaimData:
        answer = self.answer
        return ClaimData(
            version=answer.version,
            executable_asset_ids=[a.pk for a in self.executable_assets],
            minimal_example_artifact_id=answer.minimal_example_artifact_id,
            minimal_example_command=answer.minimal_example_command,
            error_paths=answer.error_paths,
            golden_artifact_ids=[a.pk for a in self.golden_artifacts],
            golden_tolerances=answer.golden_tolerances,
            compatibility=answer.compatibility,
        )


def answer_inputs(answer: Answer) -> AnswerInputs:
    return AnswerInputs(
        answer=answer,
        executable_assets=list(answer.executable_assets.select_related("blob").order_by("pk")),
        golden_artifacts=list(answer.golden_artifacts.select_related("blob").order_by("pk")),
        minimal_example_artifact=(
            Artifact.objects.select_related("blob").get(pk=answer.minimal_example_artifact_id)
            if answer.minimal_example_artifact_id
            else None
        ),
    )


def artifact_version(artifact: Artifact) -> dict:
    return {
        "id": artifact.pk,
        "kind": artifact.kind,
        "version": artifact.version,
        "file_name": artifact.file_name,
        "sha256": artifact.blob.sha256 if artifact.blob else artifact.declared_sha256,
    }


def runner_stage_params(stage: str, answer: Answer) -> dict:
    return protocol.stage_params(
        stage,
        golden_tolerances_given=answer.golden_tolerances,
        error_paths=answer.error_paths,
        thresholds=answer.thresholds,
    )


def threshold_overrides(thresholds: dict) -> dict[str, dict[str, float]]:
    """The answer's probe thresholds: its "<probe>.<threshold>" keys, by probe."""
    overrides: dict[str, dict[str, float]] = {}
    for key, value in thresholds.items():
        probe, dot, name = key.partition(".")
        if dot:
            overrides.setdefault(probe, {})[name] = value
    return overrides


def chain_probes(capability_slug: str | None, answer: Answer) -> tuple[list[dict], int | None]:
    """The probes a chain's runner stages send, and the recipe's version: none without a recipe."""
    recipe = recipes.RECIPES.get(capability_slug or "")
    if recipe is None:
        return [], None
    # An answer stored before thresholds were checked against the recipe keeps the recipe's: never looser.
    with contextlib.suppress(ValueError):
        recipe = recipes.tightened(recipe, threshold_overrides(answer.thresholds))
    probes = [{"name": p.name, "params": {**p.params, **p.thresholds}} for p in recipe.probes]
    return probes, recipe.version


def _digest(previous: str, value) -> str:
    encoded = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(previous.encode() + b"\n" + encoded).hexdigest()


def stage_digests(
    inputs: AnswerInputs, capability_id: int | None, target: Target, capability_slug: str | None = None
) -> dict[str, str]:
    """Per stage, a digest of everything it and the stages before it consume.

    Each stage's digest chains the one before, so a changed input makes its stage and every stage after
    it stale. The claim covers the answer's structured claim (artifact presence, not identity); artifact
    versions and target versions enter at the artifact stage; each runner stage adds its own parameters.
    """
    claim = inputs.claim_data()
    claim_value = {
        "capability": capability_id,
        "version": claim.version,
        "executable_assets": bool(claim.executable_asset_ids),
        "minimal_example_artifact": claim.minimal_example_artifact_id is not None,
        "minimal_example_command": claim.minimal_example_command,
        "error_paths": claim.error_paths,
        "golden_artifacts": bool(claim.golden_artifact_ids),
        "golden_tolerances": claim.golden_tolerances,
        "compatibility": claim.compatibility,
    }
    digests = {stages.CLAIM: _digest("", claim_value)}
    digests[stages.ARTIFACT] = _digest(
        digests[stages.CLAIM],
        {
            "artifacts": [artifact_version(a) for a in inputs.artifacts],
            "executable": [a.pk for a in inputs.executable_assets],
            "golden": [a.pk for a in inputs.golden_artifacts],
            "target": target.as_job_target(),
        },
    )
    previous = digests[stages.ARTIFACT]
    probes, recipe_version = chain_probes(capability_slug, inputs.answer)
    for stage in stages.RUNNER_STAGES:
        value = {stage: runner_stage_params(stage, inputs.answer)}
        if probes:  # a chain without probes keeps the digests it always had
            value["probes"] = {"recipe": recipe_version, "probes": probes}
        previous = digests[stage] = _digest(previous, value)
    return digests


def run_inputs_snapshot(inputs: AnswerInputs, target: Target) -> dict:
    answer = inputs.answer
    return {
        "answer": {"id": answer.pk, "revision": answer.revision, "version": answer.version},
        "artifacts": [artifact_version(a) for a in inputs.artifacts],
        "target": target.as_job_target(),
    }
