"""A failed soak's judged reason and findings on the question page and on the vendor's landing page: in the
reader's language with their figures, in English the reason the run stores, byte for byte; a reason its findings
do not compose is shown as stored."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.translation import override

from acceptance import judging, stages, summaries
from tests.acceptance.test_judged_reasons import IN_CHINESE, runner_failed_soak
from tests.acceptance.test_judged_sentences import SOAK_PARAMS, soak_failed
from tests.factories import make_chain, make_run, put_to
from vendor.models import Question


def _judged(page: str) -> list[str]:
    return re.findall(r'(?s)<ul class="judged-findings">.*?</ul>', page)


def _reason(page: str) -> str:
    [found] = re.findall(r'(?s)<div class="field-error">(.*?)</div>', page)
    return found


def _escaped(text: str) -> str:
    return text.replace("'", "&#x27;")  # as the page escapes it


def _soak_page(pm, acme, acme_engineer, reason: str, findings: list[dict]) -> str:
    put_to(pm, acme, "V18", ask=True)
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    for stage in stages.CHAIN_STAGES[: stages.CHAIN_STAGES.index(stages.SOAK)]:
        make_run(chain, stage, stages.PASSED)
    make_run(chain, stages.SOAK, stages.FAILED, reason=reason, findings=findings, params=SOAK_PARAMS)
    return reverse("question-detail", args=["V18"])


@pytest.mark.django_db
def test_a_failed_soaks_reason_reads_in_chinese_and_in_english_as_stored(
    pm_client, pm, acme, acme_engineer, checklist, tmp_path
):
    judged = soak_failed(tmp_path)
    url = _soak_page(pm, acme, acme_engineer, judged.reason, judged.findings)

    page = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    reason = _reason(page)
    assert reason.startswith("运行器声称通过，但其测量不支持 — 测得 3 个请求；压测须服务 10 个; ")
    assert reason.endswith("; 负载持续了 1.060 秒设备时间；压测须持续 5 秒")
    assert "requests measured" not in page  # no English sentence of the reason is left on the page
    assert _judged(page) == []  # the reason says every judged sentence: no list repeats them

    page = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert _reason(page) == _escaped(judged.reason)
    assert _judged(page) == []
    assert "claim_unsupported" not in page


@pytest.mark.django_db
def test_a_runners_own_failure_reads_with_calculets_judgement_in_chinese_its_words_quoted(
    pm_client, pm, acme, acme_engineer, checklist, tmp_path
):
    judged = runner_failed_soak(tmp_path)
    url = _soak_page(pm, acme, acme_engineer, judged.reason, judged.findings)

    page = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    reason = _reason(page)
    assert reason.startswith(IN_CHINESE)
    assert reason.endswith("; 负载持续了 1.060 秒设备时间；压测须持续 5 秒")
    assert "requests measured" not in page and _judged(page) == []

    page = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert _reason(page) == _escaped(judged.reason.replace("1 check(s) failed", "1 check failed"))


@pytest.mark.django_db
def test_a_reason_its_findings_do_not_compose_is_shown_as_stored(
    pm_client, pm, acme, acme_engineer, checklist, tmp_path
):
    judged = runner_failed_soak(tmp_path)
    reason = f"{judged.reason}; the runner's words after calculet's"  # not how calculet composes a reason
    url = _soak_page(pm, acme, acme_engineer, reason, judged.findings)

    page = pm_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert _reason(page) == _escaped(reason).replace("1 check(s) failed", "1 项检查未通过")  # only the head said
    [chinese] = _judged(page)  # the judged sentences are still listed in Chinese below it
    assert "测得 3 个请求；压测须服务 10 个" in chinese
    assert '<span class="finding-code" title="too_few_requests">' in chinese


def _landing_reasons(client, language: str) -> list[str]:
    page = client.get(reverse("vendor-home"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
    return re.findall(r'(?s)<td class="run-reason">(.*?)</td>', page)


@pytest.mark.django_db
def test_the_vendors_latest_runs_say_a_failed_soaks_reason_in_the_readers_language(
    client, pm, acme, acme_engineer, checklist, tmp_path
):
    judged = soak_failed(tmp_path)
    _soak_page(pm, acme, acme_engineer, judged.reason, judged.findings)
    client.force_login(acme_engineer)

    soak, *passed = _landing_reasons(client, "zh-hans")  # newest first: the soak, then the stages it followed
    assert soak.startswith("运行器声称通过，但其测量不支持 — 测得 3 个请求；压测须服务 10 个; ")
    assert soak.endswith("; 负载持续了 1.060 秒设备时间；压测须持续 5 秒")
    assert "requests measured" not in soak
    assert passed and set(passed) == {"—"}

    soak, *_passed = _landing_reasons(client, "en")
    assert soak == _escaped(judged.reason)


@pytest.mark.django_db
def test_the_vendors_latest_runs_say_a_runners_own_failure_with_calculets_judgement_in_chinese(
    client, pm, acme, acme_engineer, checklist, tmp_path
):
    judged = runner_failed_soak(tmp_path)
    _soak_page(pm, acme, acme_engineer, judged.reason, judged.findings)
    client.force_login(acme_engineer)
    soak, *_passed = _landing_reasons(client, "zh-hans")
    assert soak.startswith(IN_CHINESE)
    assert "requests measured" not in soak


@pytest.mark.django_db
def test_the_vendors_latest_runs_load_their_findings_in_the_same_query(
    client, pm, acme, acme_engineer, checklist, tmp_path, django_assert_num_queries
):
    judged = soak_failed(tmp_path)
    put_to(pm, acme, "V18", ask=True)
    chain = make_chain(Question.objects.get(code="V18"), acme_engineer)
    client.force_login(acme_engineer)

    def failed_soak() -> None:
        make_run(chain, stages.SOAK, stages.FAILED, reason=judged.reason, findings=judged.findings, params=SOAK_PARAMS)

    failed_soak()
    with CaptureQueriesContext(connection) as one_run:
        assert len(_landing_reasons(client, "zh-hans")) == 1
    for _ in range(3):
        failed_soak()
    with django_assert_num_queries(len(one_run)):  # no query per run for its findings
        reasons = _landing_reasons(client, "zh-hans")
    assert len(reasons) == 4 and all(reason.startswith("运行器声称通过") for reason in reasons)


def test_a_reason_is_composed_only_from_findings_that_say_it(tmp_path):
    judged = soak_failed(tmp_path)
    with override("zh-hans"):
        assert summaries.judged_reason(judged.reason, judged.findings) is not None
        # a finding whose stored sentence is not what its template says (an older template)
        changed = [*judged.findings[:1], {**judged.findings[1], "message": "3 requests measured"}, *judged.findings[2:]]
        assert summaries.judged_reason(judged.reason, changed) is None
        # a runner's own finding beside calculet's: the reason is still calculet's alone
        runner = {"code": "processes_left_behind", "severity": "warning", "field": "sandbox", "message": "left"}
        assert summaries.judged_reason(judged.reason, [*judged.findings, runner]) is not None
        # words before a claim of a pass, which only a runner that passed makes: not calculet's composition
        assert summaries.judged_reason(f"the runner's own words; {judged.reason}", judged.findings) is None
        # a reason that names one sentence fewer than the findings
        shorter = judged.reason.rsplit("; ", 2)[0]
        assert summaries.judged_reason(shorter, judged.findings) is None


def test_a_judgement_of_more_failures_than_its_reason_names_lists_the_rest():
    said = [
        {
            "code": "too_few_requests",
            "message": f"{count} requests measured; the soak must serve 10",
            "template": "%(measured)s requests measured; the soak must serve %(required)s",
            "params": {"measured": count, "required": 10},
        }
        for count in range(1, 8)
    ]
    reason = "; ".join(item["message"] for item in said[: judging.JUDGED_IN_REASON])
    with override("zh-hans"):
        composed = summaries.judged_reason(reason, said)
    assert composed is not None
    text, rest = composed
    assert text.startswith("测得 1 个请求；压测须服务 10 个; 测得 2 个请求")
    assert "测得 6 个" not in text
    assert rest == said[5:]
