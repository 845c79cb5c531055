"""Schemathesis against /api/v1/schema/, as a vendor and as a PM: no 5xx, every response as documented.

Each operation gets a bounded number of generated requests (valid and invalid ones), once with random path
parameters and once with the ids of real objects, through the WSGI application in the test's transaction.
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from acceptance.models import Run
from acceptance.services import answer_submit, chain_start_for_answer
from calculet.actors import SYSTEM
from calculet.wsgi import application
from tests.factories import answer_draft, complete_answer
from vendor.authentication import TokenRateThrottle
from vendor.inputs import ArtifactDeclaration, CommentDraft, WebhookDraft
from vendor.services.comments import comment_create
from vendor.services.organisations import token_create
from vendor.services.uploads import upload_create
from vendor.services.webhooks import webhook_create

# tus chunks are raw bytes, like application/octet-stream.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def world(pm, vendor_a, vendor_b, question_a, question_b, artifacts_a, artifacts_b, capability):
    answer = answer_submit(
        actor=vendor_a.user,
        question=question_a,
        draft=answer_draft({**complete_answer(artifacts_a), "capability": capability.slug}),
    )
    chain_start_for_answer(answer.pk)
    upload = upload_create(
        actor=vendor_a.user,
        length=64,
        declaration=ArtifactDeclaration(kind="golden", version="9.0", file_name="fuzz.npz", sha256="c" * 64),
    )
    comment = comment_create(actor=vendor_a.user, question=question_a, draft=CommentDraft(body="fuzz @alice"))
    team = pm.user.membership.organisation
    hook = webhook_create(
        actor=pm.user, draft=WebhookDraft(organisation=team, name="fuzz", url="https://example.org/hook")
    )
    return {
        "comment_id": comment.pk,
        "hook_id": hook.pk,
        "code": question_a.code,
        "answer_id": answer.pk,
        "artifact_id": artifacts_a["golden"].pk,
        "upload_id": str(upload.pk),
        "run_id": Run.objects.filter(answer=answer).first().pk,
        "capability": capability.slug,
    }


def known_path_parameters(operation, world: dict, spare_token_id: int) -> dict:
    values = {**world, "token_id": spare_token_id}
    values["slug"] = "simulator" if operation.path.startswith("/api/v1/targets/") else world["capability"]
    names = {parameter.name for parameter in operation.path_parameters}
    return {name: values[name] for name in names if name in values}


def fuzz(account, world, spare_token_id, examples_per_operation):
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", application)
    headers = {"Authorization": f"Token {account.key}"}
    failures = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 20
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for path_parameters in ({}, known_path_parameters(operation, world, spare_token_id)):
                if mode == GenerationMode.NEGATIVE and path_parameters:
                    continue  # invalid path parameters are already covered by the random pass

                @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters or None))
                @settings(
                    max_examples=examples_per_operation,
                    deadline=None,
                    derandomize=True,
                    database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                def check(case):
                    case.call_and_validate(headers=headers, checks=CHECKS)

                try:
                    check()
                except Unsatisfiable:
                    continue  # the operation has no input that can be made invalid this way
                except (Exception, BaseExceptionGroup) as error:  # collect every operation's failures
                    failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): {error}")
    assert not failures, "\n\n".join(failures)


@pytest.fixture
def unthrottled(monkeypatch):
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": "100000/min"})


@pytest.fixture
def wsgi_in_transaction():
    """Like Django's test client: a request's start and end must not close the test's database connection."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.mark.parametrize("role", ["vendor_a", "pm"])
def test_the_api_survives_fuzzing_and_matches_its_schema(request, world, unthrottled, wsgi_in_transaction, role):
    account = request.getfixturevalue(role)
    spare, _ = token_create(actor=SYSTEM, user=account.user, name="spare")
    # Generated requests per operation, mode and kind of path parameters (`--fuzz-examples`): 8 in the whole suite,
    # CI's fast half included; `dev.py test --fast` asks for 2, a quarter of the time (generating costs more than
    # sending).
    fuzz(account, world, spare.pk, request.config.getoption("--fuzz-examples"))
