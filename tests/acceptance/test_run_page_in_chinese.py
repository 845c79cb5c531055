"""A failed run on V18's page in Chinese: its verdicts and its findings' codes read as labels in the reader's
language, the run's summary is translated, and only the runner's own words stay as the runner wrote them
(a finding stores its code and the runner's sentence, nothing to translate it from)."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from acceptance import stages
from tests.acceptance.test_proof import answer_with, package, run_chain
from tests.factories import make_capability, make_question

pytestmark = pytest.mark.django_db(transaction=True)

RUNNERS_WORDS = "the package&#x27;s decode batch is 8; the probe asks for 16"


def _probes(page: str) -> str:
    [probes] = re.findall(r'(?s)<ul class="probes">.*?</ul>', page)
    return probes


def test_a_failed_runs_verdict_and_findings_read_in_chinese(
    vendor_user, organisation, pm_user, simulator_online, tmp_path
):
    question = make_question("V18", organisation=organisation, state="asked")
    capability = make_capability("decode-batch-16", status="C3", questions=[question])
    calbin, golden = package(vendor_user, tmp_path, decode_batch=8)  # a batch-8 package answering batch 16
    chain = run_chain(answer_with(vendor_user, question, capability, calbin, golden))
    assert chain.runs.get(stage=stages.RUNNER).state == stages.FAILED
    client = Client()
    client.force_login(pm_user)
    url = reverse("question-detail", args=["V18"])

    chinese = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    probes = _probes(chinese)
    assert '<span class="badge verdict-failed">失败</span>' in probes and ">fail<" not in probes
    assert f'<span class="finding-code" title="not_exercised">制品未覆盖此项</span>: {RUNNERS_WORDS}' in probes
    assert "1 个探针未通过 — decode_batch" in chinese

    english = _probes(client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode())
    assert '<span class="badge verdict-failed">failed</span>' in english
    assert (
        f'<span class="finding-code" title="not_exercised">not exercised by the package</span>: {RUNNERS_WORDS}'
        in english
    )
