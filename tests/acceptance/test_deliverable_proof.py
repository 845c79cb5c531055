"""A calbin deliverable is accepted only when every capability it proves has passed every stage on it: V21's
overlap runs prove fixed-task-infer and parallel-mode, and one of the two is not enough."""

import pytest

from acceptance import stages
from acceptance.models import Chain
from acceptance.services import answer_submit, chain_advance
from acceptance.services.targets import target_ensure_simulator
from evidence.models import Capability
from tests.factories import answer_draft, pass_stages, put_to
from vendor.models import Deliverable, Question

pytestmark = pytest.mark.django_db


def passed_chain(question: Question, engineer, slug: str, deliverable: str = "overlap-runs") -> Chain:
    """An answer naming the deliverable for `slug`, its chain with every stage passed."""
    data = {"summary": "the runs, measured", "deliverable": deliverable, "capability": slug}
    answer = answer_submit(actor=engineer, question=question, draft=answer_draft(data))
    digests = {stage: f"{index:064x}" for index, stage in enumerate(stages.CHAIN_STAGES, start=1)}
    chain = Chain.objects.create(
        question=question,
        capability=question.capabilities.get(slug=slug),
        answer=answer,
        target=target_ensure_simulator(),
        stage_digests=digests,
    )
    pass_stages(chain, stages.SOAK)
    chain_advance(chain)
    return chain


def test_one_proven_capability_of_two_leaves_the_deliverable_owed(pm_user, organisation, vendor_user, checklist):
    put_to(pm_user, organisation, "V21", ask=True)
    question = Question.objects.get(code="V21")
    deliverable = question.deliverables.get(key="overlap-runs")
    assert sorted(deliverable.capabilities.values_list("slug", flat=True)) == ["fixed-task-infer", "parallel-mode"]

    passed_chain(question, vendor_user, "fixed-task-infer")
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.OWED

    chain = passed_chain(question, vendor_user, "parallel-mode")
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.ACCEPTED
    assert deliverable.reason.startswith("every stage passed for each capability it proves: fixed-task-infer on ")
    assert f"parallel-mode on simulator with answer {chain.answer_id}" in deliverable.reason


def test_a_capability_pinned_at_c4_is_not_asked_of_the_deliverable(pm_user, organisation, vendor_user, checklist):
    """A deliverable that also names the CalRT 0.7.6 multi-device capability, pinned at C4 and never moving, is
    accepted on the capability that can pass. No question of the seed names it (V36 asks for a roadmap), so the
    test links it to V30's package."""
    put_to(pm_user, organisation, "V30", ask=True)
    question = Question.objects.get(code="V30")
    deliverable = question.deliverables.get(key="single-chiplet-package")
    pinned = Capability.objects.get(slug="multi-physical-device-calrt-0-7-6")
    question.capabilities.add(pinned)
    deliverable.capabilities.remove(*deliverable.capabilities.exclude(slug="single-chiplet"))
    deliverable.capabilities.add(pinned)
    passed_chain(question, vendor_user, "single-chiplet", deliverable="single-chiplet-package")
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.ACCEPTED
