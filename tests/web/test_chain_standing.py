"""The question list and the vendor's landing page show the worst news first: of a question's chains, the worst
state, then the furthest (a failed soak on one chain reads before every stage passed on another)."""

import pytest
from django.urls import reverse

from acceptance import stages
from evidence.models import Capability
from tests.factories import make_chain, make_run, put_to
from vendor.models import Question


def test_the_worst_state_comes_before_the_furthest_position():
    done = (stages.DONE, stages.DONE)
    failed_soak = (stages.SOAK, stages.FAILED)
    stale_golden = (stages.GOLDEN, stages.STALE)
    running_claim = (stages.CLAIM, stages.RUNNING)
    assert stages.worst_standing([done, failed_soak]) == failed_soak
    assert stages.worst_standing([running_claim, stale_golden, done]) == stale_golden
    assert stages.worst_standing([running_claim, done]) == running_claim
    # The same state on two chains: the furthest of them.
    assert stages.worst_standing([(stages.RUNNER, stages.FAILED), failed_soak]) == failed_soak


def v18_one_chain_done_one_failed_at_soak(pm, acme, acme_engineer) -> Question:
    """V18 as the issue found it: its batch-8 chain passed every stage, its batch-16 chain failed soak."""
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    for slug, soak in (("decode-batch-8", stages.PASSED), ("decode-batch-16", stages.FAILED)):
        chain = make_chain(question, acme_engineer, capability=Capability.objects.get(slug=slug))
        for stage in stages.CHAIN_STAGES[:-1]:
            make_run(chain, stage, stages.PASSED)
        make_run(chain, stages.SOAK, soak)
    return question


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "failed", "passed"),
    [
        ("en", "Load, soak and performance: failed", "Every stage passed"),
        ("zh-hans", "负载、浸泡与性能：失败", "全部阶段通过"),
    ],
)
def test_the_list_and_the_vendors_page_show_the_failed_chain_not_the_finished_one(
    client, pm, acme, acme_engineer, checklist, language, failed, passed
):
    v18_one_chain_done_one_failed_at_soak(pm, acme, acme_engineer)
    client.force_login(pm)
    listed = client.get(reverse("question-list"), {"text": "V18"}, HTTP_ACCEPT_LANGUAGE=language).content.decode()
    assert f'data-standing="soak-failed">{failed}</td>' in listed
    assert f">{passed}</td>" not in listed
    client.force_login(acme_engineer)
    landing = client.get(reverse("vendor-home"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
    assert f'<td class="chain-standing">{failed}</td>' in landing
    assert f">{passed}</td>" not in landing
    # The stage filter still means the furthest any chain reached.
    client.force_login(pm)
    furthest = client.get(reverse("question-list"), {"stage": stages.DONE}).content.decode()
    assert 'data-standing="soak-failed"' in furthest


@pytest.mark.django_db
def test_the_vendors_page_shows_each_question_s_latest_answer_or_that_none_was_given(
    client, pm, acme, acme_engineer, checklist
):
    v18_one_chain_done_one_failed_at_soak(pm, acme, acme_engineer)  # two answers, neither complete
    put_to(pm, acme, "V19")
    client.force_login(acme_engineer)
    landing = client.get(reverse("vendor-home")).content.decode()
    v18 = landing.split("<strong>V18</strong>", 1)[1].split("</tr>", 1)[0]
    assert "r2" in v18 and "incomplete" in v18 and "missing" in v18
    v19 = landing.split("<strong>V19</strong>", 1)[1].split("</tr>", 1)[0]
    assert "not answered yet" in v19 and "r1" not in v19
