"""E2 is bound to the version and to the organisation that delivered it: SDKs built with g++, delivered through
answer_submit and checked by deliverable_check_answer, then the gate asked to move decode batch 8 to C1 (its
simulator stages passed on a target running CalRT 0.7.6, its package answer at version 1.0.0 as
docs/vendor-guide.md's is)."""

import pytest

from acceptance import stages
from acceptance.inputs import PromotionRequest
from acceptance.models import Chain
from acceptance.recipes import DECODE_CALLS, KV_MANAGER_CALLS
from acceptance.services import answer_submit, capability_promote, chain_start_for_answer
from acceptance.services.deliverable_checks import deliverable_check_answer
from npu_sim.sdk import sdk_archive
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_artifact,
    make_capability,
    make_deliverable,
    make_question,
    make_user,
    pass_stages,
)
from vendor.models import Deliverable

pytestmark = pytest.mark.django_db

SDK_CALLS = list(dict.fromkeys([*KV_MANAGER_CALLS, *DECODE_CALLS]))


@pytest.fixture
def soaked(vendor_user, question, capability, calbin, golden, simulator_online):
    """decode-batch-8's package answer (version 1.0.0) with every stage passed on the simulator."""
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden, version="1.0.0")
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    chain_start_for_answer(answer.pk)
    pass_stages(Chain.objects.get(answer=answer, target=simulator_online), stages.SOAK)
    return capability


@pytest.fixture
def kv_manager(db):
    return make_capability("kv-manager-api")


@pytest.fixture
def deliver_sdk(kv_manager, tmp_path):
    """An SDK carrying the KV manager's and decode's calls, answered by `user` for a question of its
    organisation, and checked; the checked deliverable. `options` are build_sdk's (`version`: the library's and
    the headers')."""
    made = []

    def deliver(user, *, answer_version="0.7.6", **options) -> Deliverable:
        made.append(user)
        organisation = user.membership.organisation
        question = make_question(f"V{20 + len(made)}", organisation=organisation, state="asked", deliverable=None)
        kv_manager.questions.add(question)
        deliverable = make_deliverable(question, "sdk", kind="sdk", capabilities=[kv_manager])
        payload = sdk_archive(tmp_path / f"sdk-{len(made)}", SDK_CALLS, **options)
        sdk = make_artifact(user, payload, kind="sdk", version=answer_version, file_name=f"calrt-{len(made)}.tar")
        golden = make_artifact(user, b"golden", kind="golden", version="1.0", file_name=f"golden-{len(made)}.npz")
        data = complete_answer_data(capability=kv_manager, calbin=sdk, golden=golden, deliverable="sdk")
        answer = answer_submit(actor=user, question=question, draft=answer_draft({**data, "version": answer_version}))
        deliverable_check_answer(answer.pk)
        deliverable.refresh_from_db()
        return deliverable

    return deliver


def c1_reasons(capability, pm_user) -> list[str]:
    attempt = capability_promote(actor=pm_user, capability=capability, request=PromotionRequest(to="C1"))
    return [reason["code"] for reason in attempt.reasons]


def test_the_answers_own_sdk_at_the_targets_version_is_e2(soaked, deliver_sdk, vendor_user, pm_user):
    assert c1_reasons(soaked, pm_user) == ["no_sdk_evidence"]
    delivered = deliver_sdk(vendor_user)
    assert delivered.state == Deliverable.ACCEPTED, delivered.reason
    assert c1_reasons(soaked, pm_user) == []


def test_another_organisations_sdk_does_not_count(soaked, deliver_sdk, pm_user):
    delivered = deliver_sdk(make_user("gus", "globex", "vendor"))
    assert delivered.state == Deliverable.ACCEPTED, delivered.reason
    assert soaked.evidence.filter(deliverable=delivered).exists()  # E2 for decode batch 8, but globex's
    assert c1_reasons(soaked, pm_user) == ["no_sdk_evidence"]


def test_an_sdk_of_another_version_than_the_targets_does_not_count(soaked, deliver_sdk, vendor_user, pm_user):
    delivered = deliver_sdk(vendor_user, answer_version="0.8.0", version="0.8.0")
    assert delivered.state == Deliverable.ACCEPTED, delivered.reason  # a sound SDK, of CalRT 0.8.0
    assert c1_reasons(soaked, pm_user) == ["no_sdk_evidence"]  # the simulator runs 0.7.6


@pytest.mark.parametrize(
    ("answer_version", "options", "named"),
    [
        ("0.7.6", {"file_name": "libcalrt.so"}, "the library's file name names no version"),
        ("0.7.6", {"header_version": None}, "a header's version macro names no version"),
        ("0.8.0", {}, "the answer says version 0.8.0, the library's file name 0.7.6"),
        ("0.7.6", {"header_version": "0.8.0"}, "CALRT_VERSION in calrt/calrt.h says version 0.8.0"),
        (
            "0.7.6",
            {"file_name": "libcalrt.so.0.7.6", "soname": "libcalrt.so.0"},
            "the soname libcalrt.so.0 is not a link",
        ),
    ],
)
def test_an_unversioned_or_mismatched_sdk_is_rejected_naming_which(
    soaked, deliver_sdk, vendor_user, pm_user, answer_version, options, named
):
    delivered = deliver_sdk(vendor_user, answer_version=answer_version, **options)
    assert delivered.state == Deliverable.REJECTED
    assert named in delivered.reason
    assert c1_reasons(soaked, pm_user) == ["no_sdk_evidence"]


def test_the_soname_chain_of_a_real_sdk_is_accepted(soaked, deliver_sdk, vendor_user, pm_user):
    delivered = deliver_sdk(
        vendor_user, file_name="libcalrt.so.0.7.6", soname="libcalrt.so.0", links=("libcalrt.so", "libcalrt.so.0")
    )
    assert delivered.state == Deliverable.ACCEPTED, delivered.reason
    assert c1_reasons(soaked, pm_user) == []
