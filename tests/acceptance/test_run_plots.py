"""The golden and soak charts of a real chain (the simulator's package through the runner in the sandbox, judged
by calculet), drawn from what its runs measured and read on the question page in both languages."""

import re
import shlex
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from acceptance import stages
from acceptance.models import Chain
from acceptance.services import chain_start_for_answer
from tests.factories import drive

pytestmark = pytest.mark.django_db(transaction=True)

TITLES = {
    "en": [
        "Cosine against the golden, step by step",
        "Top-5 agreement with the golden, step by step",
        "Absolute error of decode_logits against the golden",
        "Each request: decode rate against latency",
        "Cosine of each sampled response against the golden",
        "Top-k agreement of each sampled response with the golden",
        "Absolute error of the sampled responses against the golden",
    ],
    "zh-hans": [
        "与 golden 的余弦相似度（逐步）",
        "与 golden 的 top-5 一致率（逐步）",
        "decode_logits 相对 golden 的绝对误差",
        "每个请求：decode 速率与延迟",
        "每个抽样响应与 golden 的余弦相似度",
        "每个抽样响应与 golden 的 top-k 一致率",
        "抽样响应相对 golden 的绝对误差",
    ],
}
REQUIRED = {"en": "required 10.0 token/s", "zh-hans": "要求 10.0 token/s"}


@pytest.fixture
def this_checkouts_runner(settings):
    """The simulator's runner from this checkout, not from whichever copy the environment has installed."""
    checkout = Path(__file__).resolve().parents[2]
    settings.ACCEPTANCE_RUNNER_COMMAND = shlex.join(
        ["/usr/bin/env", f"PYTHONPATH={checkout}", sys.executable, "-m", "npu_sim", "run"]
    )


def test_a_real_chain_draws_its_golden_and_soak_from_what_its_runs_measured(
    answer, simulator_online, pm_user, this_checkouts_runner
):
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer, target__slug="simulator")
    drive(chain)
    runs = {run.stage: run for run in chain.runs.all()}
    assert runs[stages.GOLDEN].state == stages.PASSED and runs[stages.SOAK].state == stages.PASSED
    golden = runs[stages.GOLDEN].metrics["tensors"]
    steps = [*golden["prefill_logits"]["rows"], *golden["decode_logits"]["rows"]]
    assert len(steps) == 1 + golden["decode_logits"]["shape"][0]
    assert all(step["cosine"] == pytest.approx(1.0) for step in steps)  # the simulator is the golden's device
    per_request = runs[stages.SOAK].metrics["per_request"]
    assert len(per_request) == runs[stages.SOAK].metrics["completed"]

    client = Client()
    client.force_login(pm_user)
    for language, titles in TITLES.items():
        body = client.get(reverse("question-detail", args=["V18"]), HTTP_ACCEPT_LANGUAGE=language).content.decode()
        for title in titles:
            assert f"<title>{title}</title>" in body, (language, title)
        assert REQUIRED[language] in body
        # Every request is a dot titled with its own measured latency and rate.
        dots = re.findall(r'<circle class="dot"[^>]*><title>([^<]*)</title>', body)
        assert len(dots) == len(per_request)
        first = per_request[0]
        assert f"{first['latency_ms']:.0f}" in dots[0] and f"{first['decode_tokens_per_s']:.3g}" in dots[0]
        # One bar per sampled response, each labelled with its cosine.
        assert "<title>1: 1</title>" in body
