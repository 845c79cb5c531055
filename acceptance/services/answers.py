"""A vendor's answer entering acceptance: stored with the capability it claims, and its chains started."""

from django.db import transaction
from django.utils.translation import gettext_noop

from acceptance import limits, recipes
from acceptance.models import AnswerClaim
from acceptance.services.chains import chain_start_for_answer
from acceptance.services.deliverable_checks import deliverable_check_wanted
from acceptance.services.dispatch import deliverable_check_send
from calculet.actors import Actor
from calculet.audit import audit_record
from calculet.errors import DomainError, FieldErrors
from evidence.models import Capability
from vendor.claim import compatibility_errors
from vendor.inputs import AnswerDraft
from vendor.models import Answer, Deliverable, Question
from vendor.services.answers import answer_store


def _claimed_capability(question: Question, slug: str) -> Capability | None:
    if not slug:
        return None
    capability = question.capabilities.filter(slug=slug).first()
    if capability is None:
        raise DomainError(
            gettext_noop("Capability %(slug)s is not linked to %(question)s."),
            field="capability",
            code="not_found",
            params={"slug": slug, "question": question.code},
        )
    return capability


def _proved_recipe(answer: Answer, capability: Capability | None) -> recipes.Recipe | None:
    """The recipe of the capability the answer proves: the one it claims, else its question's only one."""
    if capability is None:
        linked = list(answer.question.capabilities.all()[:2])
        capability = linked[0] if len(linked) == 1 else None
    return recipes.RECIPES.get(capability.slug) if capability is not None else None


def _check_limits_and_ranges(answer: Answer, capability: Capability | None) -> None:
    """An answer only tightens what it is held to (`limits.answer_limit_errors`) and its compatibility ranges
    are PEP 440 specifiers (`compatibility_errors`); every error is raised at once, each naming its field."""
    recipe = _proved_recipe(answer, capability)
    errors = {
        **compatibility_errors(answer.compatibility),
        **limits.answer_limit_errors(recipe, answer.golden_tolerances, answer.thresholds),
    }
    if errors:
        raise FieldErrors(errors)


def _check_deliverable_proves(answer: Answer, capability: Capability) -> None:
    """A package proves only what it is: an answer for batch 8 cannot claim batch 16."""
    deliverable = answer.deliverable
    if deliverable is None:
        return
    proves = sorted(deliverable.capabilities.values_list("slug", flat=True))
    if proves and capability.slug not in proves:
        raise DomainError(
            gettext_noop("Deliverable %(deliverable)s proves %(proves)s, not %(capability)s."),
            field="capability",
            params={"deliverable": deliverable.key, "proves": list(proves), "capability": capability.slug},
        )


def answer_submit(*, actor: Actor, question: Question, draft: AnswerDraft) -> Answer:
    """Store a new revision of the actor's organisation's answer (`vendor.services.answers.answer_store`,
    which states the preconditions), with the capability it names, if any, among those linked to the
    question and, when its deliverable names the capabilities it proves, among those. A complete answer
    starts its acceptance chains once the transaction commits. Bad input raises DomainError naming the
    field and stores nothing."""
    capability = _claimed_capability(question, draft.capability)
    with transaction.atomic():
        answer = answer_store(actor=actor, question=question, draft=draft)
        _check_limits_and_ranges(answer, capability)
        if capability is not None:
            _check_deliverable_proves(answer, capability)
            AnswerClaim.objects.create(answer=answer, capability=capability)
            audit_record(actor=actor, action="answer.claim", obj=answer, after={"capability": capability.slug})
        answer_id = answer.pk
        if deliverable_check_wanted(answer):
            transaction.on_commit(lambda: deliverable_check_send(answer_id))
        elif answer.complete and (answer.deliverable is None or answer.deliverable.kind == Deliverable.CALBIN):
            # Only a model package runs through the chain; a document is reviewed by a PM.
            transaction.on_commit(lambda: chain_start_for_answer(answer_id))
    return answer
