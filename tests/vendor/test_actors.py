"""An actor is a person, the product itself or a named command; each is named and checked as what it is."""

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from calculet.actors import SYSTEM, actor_label, actor_user, command
from calculet.audit import audit_record
from calculet.errors import ForbiddenError
from calculet.models import AuditEntry
from tests.factories import db_snapshot, make_deliverable, make_question
from vendor.access import may_act_as_pm, user_membership
from vendor.models import Organisation
from vendor.services.deliverables import deliverable_accept

pytestmark = pytest.mark.django_db


def test_each_actor_is_named_as_the_audit_log_shows_it(pm):
    assert (actor_user(pm.user), actor_label(pm.user)) == (pm.user, pm.user.username)
    assert (actor_user(SYSTEM), actor_label(SYSTEM)) == (None, "system")
    assert (actor_user(command("sweep_runs")), actor_label(command("sweep_runs"))) == (None, "manage.py sweep_runs")
    assert actor_user(AnonymousUser()) is None


def test_an_audit_row_names_the_person_or_the_machine(pm):
    with transaction.atomic():
        by_pm = audit_record(actor=pm.user, action="thing.change", object_type="demo", object_id="1")
        by_command = audit_record(actor=command("seed_demo"), action="thing.change", object_type="demo", object_id="2")
    assert AuditEntry.objects.get(pk=by_pm.pk).actor == pm.user
    row = AuditEntry.objects.get(pk=by_command.pk)
    assert (row.actor, row.actor_label) == (None, "manage.py seed_demo")


def test_a_machine_is_no_member_and_no_pm():
    for machine in (SYSTEM, command("promote_capability")):
        assert user_membership(machine) is None
        assert may_act_as_pm(machine) is False


def test_only_the_system_not_any_command_decides_a_deliverable_without_a_pm(vendor_a):
    question = make_question("V18", organisation=Organisation.objects.get(slug="acme"), deliverable=None)
    deliverable = make_deliverable(question, "package-batch-8")
    before = db_snapshot()
    with pytest.raises(ForbiddenError):
        deliverable_accept(deliverable, actor=command("shell"), reason="looks fine")
    assert db_snapshot() == before
    accepted = deliverable_accept(deliverable, actor=SYSTEM, reason="every stage passed")
    assert accepted.decided_by is None
