"""A PM and a vendor are refused on the Chinese pages and through the API in Chinese: every refusal reads in
Chinese, with no English sentence left (the laptop tier's check of visible text: ASCII words outside the
checklist's own text, codes and names), while the API's fields and codes stay as they are. The same steps
in English show English, which the check finds: it is not a check that passes whatever the page says."""

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from evidence.models import Capability
from tests.factories import complete_answer, make_artifact, put_to, sha256
from tests.laptop.test_pages import english_a_chinese_page_may_show, english_lines
from vendor.models import Organisation

CHINESE = re.compile(r"[\u4e00-\u9fff]")
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")  # a SHA-256 quoted back: a code, not a word


@pytest.fixture
def allowed(pm, acme_engineer):
    """What the laptop tier lets a Chinese page show, and the names of this test's people."""
    return english_a_chinese_page_may_show() | {pm.username, acme_engineer.username}


def _pm_refusals(client, language: str) -> dict[str, str]:
    """A forbidden transition, a gate refusal and a deferral without its reason, each as the page shows it."""
    partial = {"HTTP_HX_REQUEST": "true", "HTTP_ACCEPT_LANGUAGE": language}
    slug = Capability.objects.filter(status="C3", pinned=False).values_list("slug", flat=True).first()
    edit = client.post(reverse("question-edit", args=["V10"]), {"state": "closed", "priority": "p1"}, **partial)
    gate = client.post(reverse("capability-promote", args=[slug]), {"to": "C2"}, **partial)
    ticket = client.post(reverse("question-ticket", args=["V11"]), {"state": "deferred", "priority": "p1"}, **partial)
    return {"transition": edit.content.decode(), "gate": gate.content.decode(), "reason": ticket.content.decode()}


def _vendor_refusals(client, language: str) -> dict[str, str]:
    page = client.post(
        reverse("notifications"), {"email": "not-an-address", "language": "zh-hans"}, HTTP_ACCEPT_LANGUAGE=language
    )
    return {"e-mail": page.content.decode()}


@pytest.mark.django_db
def test_a_pm_and_a_vendor_are_refused_in_chinese_on_the_pages(client, pm, acme_engineer, checklist, allowed):
    client.force_login(pm)
    pages = _pm_refusals(client, "zh-hans")
    assert "问题不能从“新建”变为“已关闭”" in pages["transition"]
    assert "没有完整的回答指向该能力：尚未运行任何验收。" in pages["gate"]
    assert "请给出将问题设为“已延后”的原因。" in pages["reason"]
    client.force_login(acme_engineer)
    pages |= _vendor_refusals(client, "zh-hans")
    assert "请输入有效的电子邮件地址。" in pages["e-mail"]
    english = {name: english_lines(page, allowed) for name, page in pages.items()}
    assert english == dict.fromkeys(pages, [])


@pytest.mark.django_db
def test_the_same_refusals_in_english_are_found_by_the_check(client, pm, acme_engineer, checklist, allowed):
    """The wrong delivery for the test above: the English pages of the same refusals fail its check."""
    client.force_login(pm)
    pages = _pm_refusals(client, "en")
    client.force_login(acme_engineer)
    pages |= _vendor_refusals(client, "en")
    assert "A question cannot move from New to Closed" in pages["transition"]
    assert "Enter a valid e-mail address." in pages["e-mail"]
    for name, page in pages.items():
        assert english_lines(page, allowed), name


def _api_refusals(client, engineer, **headers) -> dict[str, dict]:
    """An answer that loosens a limit and names no version range, and an upload whose bytes are not the
    declared ones: the API's error bodies."""
    artifacts = {
        "calbin": make_artifact(engineer, kind="calbin", version="0.7.6", file_name="qwen3-b8.calbin"),
        "golden": make_artifact(engineer, kind="golden", version="0.7.6", file_name="golden-b8.npz"),
    }
    answer = {
        **complete_answer(artifacts),
        "deliverable": "package-batch-8",
        "capability": "decode-batch-8",
        "compatibility": {"calrt": "nonsense", "driver": ">=2.3", "firmware": ">=1.8", "chip": "calculet-2c"},
        "thresholds": {"soak_requests": 1},
    }
    limits = client.post("/api/v1/questions/V18/answers/", answer, content_type="application/json", **headers)
    upload = {
        "kind": "golden",
        "version": "1.0",
        "sha256": sha256(b"other"),
        "file": SimpleUploadedFile("golden.npz", b"golden bytes"),
    }
    bad_upload = client.post("/api/v1/artifacts/", upload, **headers)
    assert (limits.status_code, bad_upload.status_code) == (400, 400)
    return {"limits": limits.json(), "upload": bad_upload.json()}


def _shape(body: dict) -> list[tuple]:
    return [(error["field"], error["code"]) for error in body["errors"]]


@pytest.mark.django_db
def test_the_same_refusals_through_the_api_follow_accept_language(client, pm, acme_engineer, checklist, allowed):
    put_to(pm, Organisation.objects.get(slug="acme"), "V18", ask=True)
    client.force_login(acme_engineer)
    chinese = _api_refusals(client, acme_engineer, HTTP_ACCEPT_LANGUAGE="zh-hans")
    english = _api_refusals(client, acme_engineer)
    assert (
        _shape(chinese["limits"])
        == _shape(english["limits"])
        == [
            ("compatibility.calrt", "invalid"),
            ("thresholds.soak_requests", "invalid"),
        ]
    )
    assert _shape(chinese["upload"]) == _shape(english["upload"]) == [("sha256", "digest_mismatch")]
    said = [error["message"] for body in chinese.values() for error in body["errors"]]
    assert said[0] == "'nonsense' 不是版本范围：请给出 >=0.7.6,<0.8 这样的限定符，或 0.7.6 这样的单个版本。"
    assert said[1] == "1 低于默认值 16；答复只能收紧它。"
    assert said[2].startswith("收到内容的 SHA-256 为 ")
    assert all(CHINESE.search(message) for message in said)
    given = allowed | {"nonsense"}  # the range the vendor sent, quoted back
    assert [english_lines(f"<p>{DIGEST.sub(' ', message)}</p>", given) for message in said] == [[], [], []]
    told = [error["message"] for body in english.values() for error in body["errors"]]
    assert told[1] == "1 is lower than the default 16; an answer may only tighten it."
    assert not any(CHINESE.search(message) for message in told)
    assert english_lines(f"<p>{DIGEST.sub(' ', ' '.join(told))}</p>", given)  # the check fails on English


@pytest.mark.django_db
def test_the_apis_own_input_checks_follow_accept_language(client, pm, acme_engineer, checklist):
    """The serializers' sentences too: a version and a threshold name of the wrong form."""
    put_to(pm, Organisation.objects.get(slug="acme"), "V18", ask=True)
    client.force_login(acme_engineer)
    body = {"deliverable": "package-batch-8", "version": "not a version", "thresholds": {"no such name!": 1}}
    said = {}
    for language in ("zh-hans", "en"):
        response = client.post(
            "/api/v1/questions/V18/answers/", body, content_type="application/json", HTTP_ACCEPT_LANGUAGE=language
        )
        assert response.status_code == 400
        said[language] = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert said["zh-hans"] == {
        "version": "版本号形如 1.2 或 v0.7.6-rc1。",
        "thresholds": "名称由 1–100 个字母、数字、“_”、“.”或“-”组成。",
    }
    assert said["en"] == {
        "version": "A version looks like 1.2 or v0.7.6-rc1.",
        "thresholds": "Names are 1–100 letters, digits, '_', '.' or '-'.",
    }
