"""The question page says what each answer is for and what happened to a question without a chain."""

import pytest
from django.urls import reverse

from acceptance.services import answer_submit
from evidence.models import Capability
from tests.factories import answer_draft, complete_answer_data, make_artifact, put_to
from vendor.models import Deliverable, Question

NO_CHAIN = {
    "en": "No chain yet: only a model package runs through the acceptance chain, and no complete answer has "
    "delivered one.",
    "zh-hans": "尚无验收链：只有模型包会经过验收链，而还没有完整的答复交付模型包。",
}
NOT_YET = {
    "en": "No chain yet. A chain starts when the vendor's answer has all six elements.",
    "zh-hans": "尚无验收链。厂商答复六要素齐全后验收链才会启动。",
}


DELIVERABLE_TITLES = {
    "en": ("Model package at decode batch 4", "Model package at decode batch 8"),
    "zh-hans": ("decode batch 4 的模型包", "decode batch 8 的模型包"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_each_answer_names_its_deliverable_and_the_capability_it_claims(
    pm_client, pm, acme, acme_engineer, checklist, language
):
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    batch_4, batch_8 = (
        question.deliverables.get(capabilities__slug=slug) for slug in ("decode-batch-4", "decode-batch-8")
    )
    answer_submit(
        actor=acme_engineer,
        question=question,
        draft=answer_draft({"summary": "r1", "deliverable": batch_4.key, "capability": "decode-batch-4"}),
    )
    answer_submit(
        actor=acme_engineer, question=question, draft=answer_draft({"summary": "r2", "deliverable": batch_8.key})
    )
    body = pm_client.get(reverse("question-detail", args=["V18"]), HTTP_ACCEPT_LANGUAGE=language).content.decode()
    capability = Capability.objects.get(slug="decode-batch-4")
    # The seed's deliverable titles read in the reader's language; a capability's title is the checklist's.
    title_4, title_8 = DELIVERABLE_TITLES[language]
    assert f'<dd class="answer-deliverable">{title_4} <code>{batch_4.key}</code></dd>' in body
    assert f'<dd class="answer-capability">{capability.title} <code>decode-batch-4</code></dd>' in body
    assert f'<dd class="answer-deliverable">{title_8} <code>{batch_8.key}</code></dd>' in body
    assert body.count('<dd class="answer-capability">') == 2  # r2 names none, and says so
    # A question whose package runs through a chain keeps waiting for one.
    assert NOT_YET[language] in body and NO_CHAIN[language] not in body


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_complete_answer_checked_statically_says_so_not_that_a_chain_is_coming(
    pm_client, pm, acme, acme_engineer, checklist, language
):
    put_to(pm, acme, "V20")
    question = Question.objects.get(code="V20")
    url = reverse("question-detail", args=["V20"])
    sdk = question.deliverables.get(kind=Deliverable.SDK)
    sdk_file = make_artifact(acme_engineer, b"sdk", kind="sdk", version="0.7.6", file_name="calrt-sdk-0.7.6.tar")
    golden = make_artifact(acme_engineer, b"golden", kind="golden", version="0.7.6", file_name="golden.npz")
    # An incomplete answer is not checked: the page still waits for a complete one.
    answer_submit(actor=acme_engineer, question=question, draft=answer_draft({"deliverable": sdk.key}))
    assert NOT_YET[language] in pm_client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()
    data = complete_answer_data(capability=None, calbin=sdk_file, golden=golden, deliverable=sdk.key)
    answer_submit(actor=acme_engineer, question=question, draft=answer_draft(data))
    body = pm_client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()
    assert NO_CHAIN[language] in body
    assert NOT_YET[language] not in body
