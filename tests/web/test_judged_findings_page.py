"""A failed soak's judged findings on the question page: in the reader's language with their figures, in English
the sentences the run stores."""

import re

import pytest
from django.urls import reverse

from acceptance import stages
from tests.acceptance.test_judged_sentences import SOAK_PARAMS, soak_failed
from tests.factories import make_chain, make_run, put_to
from vendor.models import Question


def _judged(page: str) -> str:
    [found] = re.findall(r'(?s)<ul class="judged-findings">.*?</ul>', page)
    return found


@pytest.mark.django_db
def test_a_failed_soaks_findings_read_in_chinese_on_the_question_page(
    pm_client, pm, acme, acme_engineer, checklist, tmp_path
):
    judged = soak_failed(tmp_path)
    put_to(pm, acme, "V18", ask=True)
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for stage in stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(stages.SOAK)]:
        make_run(chain, stage, stages.PASSED)
    make_run(chain, stages.SOAK, stages.FAILED, reason=judged.reason, findings=judged.findings, params=SOAK_PARAMS)
    url = reverse("question-detail", args=["V18"])

    page = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "运行器声称通过，但其测量不支持 — " in page  # the reason's head; its detail is the English sentences
    chinese = _judged(page)
    assert '<span class="finding-code" title="too_few_requests">' in chinese
    assert "测得 3 个请求；压测须服务 10 个" in chinese
    assert "负载持续了 1.060 秒设备时间；压测须持续 5 秒" in chinese
    assert "requests measured" not in chinese

    english = _judged(pm_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode())
    for finding in judged.findings[1:]:  # byte for byte the stored sentence (HTML-escaped as the page shows it)
        assert finding["message"].replace("'", "&#x27;") in english
    assert "claim_unsupported" not in english  # the lead finding has no template: the reason above says it
