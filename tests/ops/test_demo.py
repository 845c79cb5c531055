"""The newcomer's demo: the V18/V17 story, built through the services and the API, and built once."""

import pytest
from django.core.management import call_command
from django.utils import timezone

from acceptance import stages
from acceptance.models import PromotionAttempt, Run
from calculet.models import AuditEntry
from evidence.models import Capability
from vendor.models import Answer, ApiToken, Artifact, Comment, Question


def counts() -> dict[str, int]:
    models = [Answer, Artifact, ApiToken, PromotionAttempt, Run, AuditEntry, Comment]
    return {model.__name__: model.objects.count() for model in models}


@pytest.mark.django_db(transaction=True)
def test_seed_demo_tells_the_story_once(chain_in_process, settings, tmp_path, capsys):
    settings.DATA_DIR = tmp_path
    call_command("import_checklist")
    call_command("seed_demo")
    first_output = capsys.readouterr().out

    v18 = Answer.objects.get(question__code="V18")
    assert v18.complete and v18.missing == []
    assert Artifact.objects.filter(state=Artifact.VERIFIED, kind__in=["calbin", "golden"]).count() == 2
    chain_runs = Run.objects.filter(chain__question__code="V18")
    assert sorted(chain_runs.values_list("stage", flat=True)) == sorted(stages.CHAIN_STAGES)
    assert set(chain_runs.values_list("state", flat=True)) == {stages.PASSED}
    assert Capability.objects.get(slug="decode-batch-8").status == "C2"
    blocked_c0 = PromotionAttempt.objects.get(capability__slug="decode-batch-8", to_status="C0")
    assert not blocked_c0.allowed
    assert [reason["code"] for reason in blocked_c0.reasons] == ["no_sdk_evidence", "no_hardware_runs"]

    v17 = Answer.objects.get(question__code="V17")
    assert not v17.complete and v17.missing == ["golden"]
    sampling = PromotionAttempt.objects.get(capability__slug="npu-sampling")
    assert not sampling.allowed and Capability.objects.get(slug="npu-sampling").status == "C3"

    v18, v17 = Question.objects.get(code="V18"), Question.objects.get(code="V17")
    assert (v18.assignee.username, v17.assignee.username) == ("lin", "acme-engineer")
    assert v18.due_date > v17.due_date >= timezone.localdate()
    thread = list(Comment.objects.filter(question=v18).order_by("id"))
    assert [comment.author.username for comment in thread] == ["pm", "acme-engineer"]
    assert [person.username for person in thread[1].mentions.all()] == ["pm"]
    assert thread[1].artifacts.get().kind == "calbin"

    token = ApiToken.objects.get(user__username="acme-engineer")
    assert token.prefix in first_output and "pm / calculet-demo" in first_output

    before = counts()
    call_command("seed_demo")
    assert counts() == before
    assert token.prefix in capsys.readouterr().out
