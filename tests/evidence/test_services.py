"""evidence_record: the one writer of evidence that is not the seed's."""

import pytest

from calculet.errors import DomainError
from calculet.models import AuditEntry
from evidence.models import EvidenceItem
from evidence.services import evidence_record
from tests.factories import make_capability, make_deliverable, make_question
from vendor.models import Organisation

pytestmark = pytest.mark.django_db


def test_a_recorded_item_carries_its_grade_scope_and_links_and_is_audited():
    acme = Organisation.objects.create(slug="acme", name="Acme", kind="vendor")
    question = make_question("V12", organisation=acme)
    capability = make_capability("custom-kernel-sdk", questions=[question])
    deliverable = make_deliverable(question, "kernel-sdk", kind="sdk", capabilities=[capability])
    item = evidence_record(
        origin=EvidenceItem.CHECK,
        grade="E2",
        conclusion="every entry point is declared and exported",
        organisation=acme,
        capabilities=[capability],
        versions={"calrt": "0.7.6", "chip": ""},
        deliverable=deliverable,
        code_prefix="SDK",
    )
    item.refresh_from_db()
    assert item.code == f"SDK-{item.pk}"
    assert list(item.grades.values_list("grade", flat=True)) == ["E2"]
    assert (item.organisation, item.deliverable, item.versions, item.current) == (
        acme,
        deliverable,
        {"calrt": "0.7.6"},
        True,
    )
    assert list(capability.evidence.all()) == [item]
    entry = AuditEntry.objects.get(action="evidence.record")
    assert entry.after["grade"] == "E2" and entry.after["capabilities"] == ["custom-kernel-sdk"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"origin": "seed"}, "origin"), ({"grade": "E5"}, "grade"), ({"versions": {"kernel": "6.1"}}, "versions")],
)
def test_bad_input_names_the_field_and_writes_nothing(overrides, field):
    arguments = {"origin": "review", "grade": "E3", "conclusion": "x", "organisation": None, "code_prefix": "REV"}
    with pytest.raises(DomainError) as error:
        evidence_record(**{**arguments, **overrides})
    assert error.value.field == field
    assert not EvidenceItem.objects.exists()
