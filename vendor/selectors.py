"""Reads for the API and pages: what a user may see (through `vendor.access`), fetched in a fixed number of
queries whatever the number of rows."""

from collections import defaultdict

from django.db.models import Prefetch, QuerySet

from acceptance.models import Chain, Run
from acceptance.selectors import RUN_SUMMARY_DEFER, chains_stages
from evidence.models import Capability
from vendor.access import answers_for_user, artifacts_for_user, questions_for_user, runs_for_user, uploads_for_user
from vendor.models import Answer, Artifact, Question, Upload


def question_list(*, user) -> QuerySet[Question]:
    return (
        questions_for_user(user)
        .select_related("section", "assignee", "organisation")
        .prefetch_related(Prefetch("capabilities", queryset=Capability.objects.order_by("position", "slug")))
    )


def answer_list(*, user, question: Question | None = None) -> QuerySet[Answer]:
    answers = answers_for_user(user)
    if question is not None:
        answers = answers.filter(question=question)
    return (
        answers.select_related("question", "organisation", "author", "capability")
        .prefetch_related(
            Prefetch("executable_assets", queryset=Artifact.objects.only("id")),
            Prefetch("golden_artifacts", queryset=Artifact.objects.only("id")),
        )
        .order_by("-revision", "-id")
    )


def artifact_list(*, user) -> QuerySet[Artifact]:
    return artifacts_for_user(user).select_related("organisation", "uploaded_by", "blob")


def upload_list(*, user) -> QuerySet[Upload]:
    return uploads_for_user(user).select_related("organisation", "artifact")


def question_chains(*, user, questions) -> dict[int, list[dict]]:
    """Per question id, its acceptance chains (on the answers the user may see) with each stage's state and
    latest run. Two queries whatever the number of questions, chains or runs."""
    chains = list(
        Chain.objects.filter(question__in=[question.pk for question in questions], answer__in=answers_for_user(user))
        .select_related("target", "capability")
        .order_by("capability__position", "capability__slug", "target__kind", "target__slug")
    )
    stages_by_chain = chains_stages(chains)
    result: dict[int, list[dict]] = defaultdict(list)
    for chain in chains:
        result[chain.question_id].append(
            {
                "capability": chain.capability.slug if chain.capability_id else None,
                "target": chain.target.slug,
                "answer": chain.answer_id,
                "stages": [
                    {"stage": stage, "state": state, "run": run.pk if run else None}
                    for stage, state, run in stages_by_chain[chain.pk]
                ],
            }
        )
    return result


def run_list(*, user) -> QuerySet[Run]:
    return (
        runs_for_user(user)
        .select_related("target", "chain__question", "chain__capability")
        .prefetch_related(Prefetch("artifacts", queryset=Artifact.objects.only("id")))
        .defer(*RUN_SUMMARY_DEFER)
    )
