import io
import os

import pytest
from django.core.management import call_command

from acceptance import stages
from acceptance.models import Chain, Run
from acceptance.services import answer_submit
from acceptance.services.targets import target_ensure_simulator
from vendor.models import Organisation, Question
from vendor.services.organisations import api_user_create
from vendor.services.questions import question_update

# Playwright's sync API runs an event loop in the test's thread; Django's async-safety check would then
# refuse every ORM call the test makes (creating users, moving a run along).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

PASSWORD = "a-long-test-password-9"


def make_user(username: str, organisation: str, role: str, *, organisation_name: str = ""):
    """A user with a membership, created the way the command line does, who can also log in to the browser."""
    user, _key = api_user_create(username, organisation, role, create_org=True, org_name=organisation_name)
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    return user


@pytest.fixture
def checklist(db):
    """The bundled checklist imported: 8 sections, 60 questions, 91 evidence items, the starting capabilities."""
    call_command("import_checklist", stdout=io.StringIO())


@pytest.fixture
def pm(db):
    return make_user("ada", "team", "pm", organisation_name="Integration team")


@pytest.fixture
def viewer(pm):
    return make_user("victor", "team", "viewer")


@pytest.fixture
def acme_engineer(db):
    return make_user("ann", "acme", "vendor", organisation_name="Acme NPU")


@pytest.fixture
def other_engineer(db):
    return make_user("bob", "bolt", "vendor", organisation_name="Bolt Silicon")


@pytest.fixture
def acme(acme_engineer):
    return Organisation.objects.get(slug="acme")


@pytest.fixture
def pm_client(client, pm):
    client.force_login(pm)
    return client


def put_to(pm, organisation, *codes, ask=False):
    """Put the questions to `organisation`, and ask them when `ask` (an answer then moves them to answered)."""
    for code in codes:
        changes = {"organisation": organisation, **({"state": "asked"} if ask else {})}
        question_update(actor=pm, question=Question.objects.get(code=code), **changes)


def make_chain(question: Question, engineer, *, capability=None) -> Chain:
    """A chain on the simulator for the engineer's (incomplete) answer, with no run yet."""
    deliverables = question.deliverables.order_by("position")
    if capability is not None and deliverables.filter(capabilities=capability).exists():
        deliverables = deliverables.filter(capabilities=capability)
    data = {"summary": "see the attached bundle", "deliverable": deliverables.first().key}
    answer = answer_submit(actor=engineer, question=question, data=data)
    digests = {stage: f"{index:064x}" for index, stage in enumerate(stages.CHAIN_STAGES, start=1)}
    return Chain.objects.create(
        question=question, capability=capability, answer=answer, target=target_ensure_simulator(), stage_digests=digests
    )


def make_run(chain: Chain, stage: str, state: str, **fields) -> Run:
    verdict = {stages.PASSED: stages.PASS, stages.FAILED: stages.FAIL, stages.ERROR: stages.ERROR}.get(state, "")
    return Run.objects.create(
        chain=chain,
        stage=stage,
        target=chain.target,
        answer=chain.answer,
        state=state,
        verdict=verdict,
        inputs_digest=chain.stage_digests[stage],
        **fields,
    )
