import pytest

from acceptance.services import answer_submit
from calculet.errors import DomainError, ForbiddenError, NotFoundError
from calculet.models import AuditEntry
from tests.factories import answer_draft, complete_answer, db_snapshot, make_artifact
from vendor.models import Answer, Artifact
from vendor.services.artifacts import ArtifactRejectedError
from vendor.services.notifications import notify


def chain_starts(callbacks) -> list:
    """What a change queued after commit besides telling people of it."""
    return [callback for callback in callbacks if getattr(callback, "func", None) is not notify]


def test_an_incomplete_answer_is_stored_with_what_it_lacks(vendor_a, question_a, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        answer = answer_submit(
            actor=vendor_a.user, question=question_a, draft=answer_draft({"version": "0.7.6", "summary": "soon"})
        )
    assert answer.complete is False
    assert answer.missing == ["executable_asset", "minimal_example", "error_path", "golden", "compatibility_range"]
    assert answer.revision == 1
    assert chain_starts(callbacks) == []  # an incomplete answer starts no chain
    question_a.refresh_from_db()
    assert question_a.state == "answered"
    assert AuditEntry.objects.filter(action="answer.submit", object_id=str(answer.pk)).exists()


def test_a_complete_answer_queues_the_chain_after_commit(
    vendor_a, question_a, artifacts_a, capability, django_capture_on_commit_callbacks
):
    data = {**complete_answer(artifacts_a), "capability": capability.slug}
    with django_capture_on_commit_callbacks() as callbacks:
        answer = answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert answer.complete is True
    assert answer.missing == []
    assert answer.claim.capability == capability
    assert list(answer.executable_assets.all()) == [artifacts_a["calbin"]]
    assert list(answer.golden_artifacts.all()) == [artifacts_a["golden"]]
    assert answer.golden_tolerances == {"max_abs": 0.02}
    assert len(chain_starts(callbacks)) == 1


def test_a_correction_is_a_new_revision_and_the_old_one_stays(vendor_a, question_a, artifacts_a):
    first = answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft({"version": "0.7.6"}))
    second = answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(complete_answer(artifacts_a)))
    assert (first.revision, second.revision) == (1, 2)
    first.refresh_from_db()
    assert first.complete is False
    assert first.version == "0.7.6"
    assert Answer.objects.filter(question=question_a).count() == 2


def test_documents_never_count_as_executable_assets_or_golden(vendor_a, question_a, artifacts_a):
    data = complete_answer(artifacts_a)
    data["executable_assets"] = [artifacts_a["document"].pk]
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert error.value.field == "executable_assets[0]"
    assert db_snapshot() == before


def test_another_organisations_artifact_is_not_found(vendor_a, question_a, artifacts_a, artifacts_b):
    data = complete_answer(artifacts_a)
    data["golden"]["artifacts"] = [artifacts_a["golden"].pk, artifacts_b["golden"].pk]
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert (error.value.field, error.value.code) == ("golden.artifacts[1]", "not_found")
    assert str(artifacts_b["golden"].pk) in error.value.message
    assert db_snapshot() == before


def test_an_unverified_artifact_is_refused(vendor_a, question_a, artifacts_a):
    with pytest.raises(ArtifactRejectedError):
        make_artifact(vendor_a.user, b"not a tar", kind="calbin", version="9.9", file_name="broken.calbin")
    rejected = Artifact.objects.get(version="9.9", state=Artifact.REJECTED)
    data = {**complete_answer(artifacts_a), "executable_assets": [rejected.pk]}
    with pytest.raises(DomainError) as error:
        answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert error.value.field == "executable_assets[0]"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"capability": "not-linked"}, "capability"),
        ({"minimal_example": {"artifact": 10**9}}, "minimal_example.artifact"),
        ({"deliverable": "package-batch-32"}, "deliverable"),
    ],
)
def test_answers_the_database_refuses_name_the_field_and_store_nothing(
    vendor_a, question_a, artifacts_a, change, field
):
    data = {**complete_answer(artifacts_a), **change}
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert error.value.field == field
    assert db_snapshot() == before


def test_only_the_questions_vendor_answers(pm, vendor_b, question_a):
    with pytest.raises(ForbiddenError):
        answer_submit(actor=pm.user, question=question_a, draft=answer_draft({}))
    with pytest.raises(NotFoundError):
        answer_submit(actor=vendor_b.user, question=question_a, draft=answer_draft({}))
    assert not Answer.objects.exists()


def test_a_command_alone_is_no_minimal_example_without_an_executable_asset(vendor_a, question_a, artifacts_a):
    data = complete_answer(artifacts_a)
    data["executable_assets"] = []
    answer = answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert answer.missing == ["executable_asset", "minimal_example"]
    example = make_artifact(vendor_a.user, kind="runner_bundle", version="1.0", file_name="example.tar")
    data["minimal_example"] = {"artifact": example.pk}
    answer = answer_submit(actor=vendor_a.user, question=question_a, draft=answer_draft(data))
    assert answer.missing == ["executable_asset"]
