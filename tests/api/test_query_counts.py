"""List endpoints make the same number of queries for one row as for many."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from acceptance.inputs import PromotionRequest
from acceptance.services import answer_submit, capability_promote, chain_start_for_answer
from calculet.actors import SYSTEM
from evidence.models import Capability, EvidenceItem, EvidenceTable, SourceReference
from tests.factories import answer_draft, complete_answer, make_artifact, make_question
from vendor.inputs import ArtifactDeclaration
from vendor.services.organisations import token_create
from vendor.services.uploads import upload_create

MANY = 12


def add_questions(vendor, count, start):
    organisation = vendor.user.membership.organisation
    for number in range(start, start + count):
        question = make_question(f"V{number:02d}", organisation=organisation, state="asked")
        capability = Capability.objects.create(slug=f"cap-{number}", title=f"Capability {number}", status="C2")
        capability.questions.add(question)


def add_answers(vendor, question, artifacts, count):
    for _ in range(count):
        answer_submit(actor=vendor.user, question=question, draft=answer_draft(complete_answer(artifacts)))


def add_artifacts(vendor, count, start):
    for number in range(start, start + count):
        make_artifact(vendor.user, kind="golden", version=f"{number}.0", file_name=f"g{number}.npz")


def add_uploads(vendor, count, start):
    for number in range(start, start + count):
        upload_create(
            actor=vendor.user,
            length=10,
            declaration=ArtifactDeclaration(kind="golden", version=f"{number}.1", file_name="u.npz", sha256="b" * 64),
        )


def add_tokens(vendor, count, start):
    for number in range(start, start + count):
        token_create(actor=SYSTEM, user=vendor.user, name=f"t{number}")


def add_evidence(count, start):
    table, _ = EvidenceTable.objects.get_or_create(prefix="R", defaults={"section": 5, "title": "Execution chain"})
    for number in range(start, start + count):
        item = EvidenceItem.objects.create(code=f"R{number:02d}", table=table, position=number, conclusion="ok")
        item.grades.create(grade="E1")
        item.statuses.create(status="C0")
        SourceReference.objects.create(item=item, position=1, raw="$SRC/a.cpp:1-2", path="a.cpp")


def add_runs(env, count):
    """Each complete answer moves the chain onto its inputs: the older run goes stale and a new one is made."""
    for _ in range(count):
        env["version"] = env.get("version", 0) + 1  # another version: new claim inputs, so a new run
        answer = answer_submit(
            actor=env["vendor"].user,
            question=env["question"],
            draft=answer_draft(
                {
                    **complete_answer(env["artifacts"]),
                    "capability": env["capability"].slug,
                    "version": f"0.8.{env['version']}",
                }
            ),
        )
        chain_start_for_answer(answer.pk)


def add_attempts(env, count):
    for _ in range(count):
        capability_promote(actor=env["pm"].user, capability=env["capability"], request=PromotionRequest(to="C2"))


def count_queries(client, url) -> int:
    client.get(url)  # warm: token bookkeeping writes once a minute
    with CaptureQueriesContext(connection) as context:
        response = client.get(url)
    assert response.status_code == 200, response.content
    assert response.json()["count"] >= 1
    return len(context.captured_queries)


@pytest.mark.parametrize(
    ("url", "grow"),
    [
        ("/api/v1/questions/", lambda env, start, n: add_questions(env["vendor"], n, start)),
        (
            "/api/v1/questions/V18/answers/",
            lambda env, start, n: add_answers(env["vendor"], env["question"], env["artifacts"], n),
        ),
        ("/api/v1/artifacts/", lambda env, start, n: add_artifacts(env["vendor"], n, start)),
        ("/api/v1/uploads/", lambda env, start, n: add_uploads(env["vendor"], n, start)),
        ("/api/v1/tokens/", lambda env, start, n: add_tokens(env["vendor"], n, start)),
        ("/api/v1/evidence/", lambda env, start, n: add_evidence(n, start)),
        ("/api/v1/capabilities/", lambda env, start, n: add_questions(env["vendor"], n, start)),
        ("/api/v1/audit/", lambda env, start, n: add_tokens(env["vendor"], n, start)),
        ("/api/v1/runs/", lambda env, start, n: add_runs(env, n)),
        ("/api/v1/capabilities/decode-batch-8/promotions/", lambda env, start, n: add_attempts(env, n)),
    ],
)
def test_list_queries_do_not_grow_with_rows(
    pm, vendor_a, question_a, artifacts_a, capability, url, grow, django_assert_num_queries
):
    env = {"vendor": vendor_a, "question": question_a, "artifacts": artifacts_a, "pm": pm, "capability": capability}
    reader = pm if url == "/api/v1/audit/" or url.endswith("/promotions/") else vendor_a
    client = reader.client()
    grow(env, 20, 1)
    with_one = count_queries(client, url)
    grow(env, 40, MANY)
    client.get(url)
    with django_assert_num_queries(with_one):
        response = client.get(url)
    assert response.json()["count"] > MANY
