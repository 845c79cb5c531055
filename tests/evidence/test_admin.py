import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from calculet.actors import SYSTEM
from calculet.models import AuditEntry
from evidence.models import (
    Archive,
    Capability,
    ChecklistDocument,
    EvidenceGrade,
    EvidenceItem,
    EvidenceStatus,
    EvidenceTable,
    PathAlias,
    SourceReference,
)
from tests.factories import make_artifact, make_user
from vendor.inputs import CommentDraft, WebhookDraft
from vendor.models import (
    Answer,
    ApiToken,
    Artifact,
    Blob,
    Comment,
    Deliverable,
    Membership,
    NotificationEvent,
    Organisation,
    Question,
    Section,
    Upload,
    Webhook,
    WebhookDelivery,
)
from vendor.services.comments import comment_create
from vendor.services.notifications import notify
from vendor.services.organisations import token_create
from vendor.services.webhooks import webhook_create

pytestmark = pytest.mark.django_db

READ_ONLY_MODELS = [
    ChecklistDocument,
    PathAlias,
    Archive,
    EvidenceTable,
    EvidenceItem,
    EvidenceGrade,
    EvidenceStatus,
    SourceReference,
    Membership,
    ApiToken,
    Section,
    Blob,
    Artifact,
    Answer,
    Deliverable,
    Upload,
    AuditEntry,
    Comment,
    NotificationEvent,
    Webhook,
    WebhookDelivery,
]


def admin_url(model, view, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def pm(checklist):
    user = get_user_model().objects.create_superuser("lead", password=None)
    team = Organisation.objects.create(slug="team", name="Integration", kind=Organisation.INTEGRATOR)
    Membership.objects.create(user=user, organisation=team, role=Membership.PM)
    token_create(actor=SYSTEM, user=user, name="laptop")
    engineer = make_user("cora", "chipco", "vendor", organisation_name="Chip Co")
    vendor = engineer.membership.organisation
    make_artifact(engineer, kind=Artifact.CALBIN, version="1.0", file_name="m.calbin")
    Answer.objects.create(question=Question.objects.get(code="V18"), organisation=vendor, revision=1)
    Upload.objects.create(organisation=vendor, length=3, expires_at=timezone.now())
    question = Question.objects.get(code="V20")
    Question.objects.filter(pk=question.pk).update(organisation=vendor)
    comment_create(actor=user, question=question, draft=CommentDraft(body="a comment"))
    webhook_create(actor=user, draft=WebhookDraft(organisation=team, name="chat", url="https://example.org/hook"))
    notify("overdue", actor=SYSTEM, organisation_id=vendor.pk, question_id=question.pk)
    return user


@pytest.fixture
def pm_client(client, pm):
    client.force_login(pm)
    return client


def test_every_model_has_a_page(pm_client):
    for model in READ_ONLY_MODELS + [Question]:
        assert pm_client.get(admin_url(model, "changelist")).status_code == 200, model
        obj = model.objects.order_by("pk").first()
        assert pm_client.get(admin_url(model, "change", obj.pk)).status_code == 200, model


def test_read_only_models_refuse_writes(pm_client):
    for model in READ_ONLY_MODELS:
        assert pm_client.get(admin_url(model, "add")).status_code == 403, model
        obj = model.objects.order_by("pk").first()
        page = pm_client.get(admin_url(model, "change", obj.pk)).content.decode()
        assert 'name="_save"' not in page, model
        assert pm_client.post(admin_url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403, model
        assert model.objects.filter(pk=obj.pk).exists(), model


def test_a_webhooks_secret_is_not_shown_in_the_admin(pm_client):
    hook = Webhook.objects.get()
    assert hook.secret not in pm_client.get(admin_url(Webhook, "change", hook.pk)).content.decode()


def test_audit_entries_cannot_be_changed_through_the_admin(pm_client):
    entry = AuditEntry.objects.order_by("id").first()
    before = (entry.action, entry.object_repr)
    response = pm_client.post(admin_url(AuditEntry, "change", entry.pk), {"action": "edited", "object_repr": "x"})
    assert response.status_code == 403
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert (entry.action, entry.object_repr) == before


def test_question_state_is_read_only_and_edits_go_through_the_service(pm_client, pm):
    question = Question.objects.get(code="V18")
    url = admin_url(Question, "change", question.pk)
    page = pm_client.get(url).content.decode()
    assert 'name="priority"' in page
    assert 'name="state"' not in page
    audit_count = AuditEntry.objects.count()

    response = pm_client.post(url, {"priority": "p0", "state": "closed", "organisation": "", "assignee": ""})

    assert response.status_code == 302
    question.refresh_from_db()
    assert (question.priority, question.state) == ("p0", "new")
    entry = AuditEntry.objects.order_by("-id").first()
    assert AuditEntry.objects.count() == audit_count + 1
    assert (entry.action, entry.actor, entry.before, entry.after) == (
        "question.update",
        pm,
        {"priority": "p2"},
        {"priority": "p0"},
    )


def test_a_refused_question_edit_changes_nothing(pm_client, pm):
    question = Question.objects.get(code="V18")
    audit_count = AuditEntry.objects.count()
    url = admin_url(Question, "change", question.pk)
    team = pm.membership.organisation  # a question is put to a vendor, never to the integration team
    response = pm_client.post(url, {"priority": "p0", "organisation": team.pk, "assignee": ""}, follow=True)
    assert "Not saved" in response.content.decode()
    question.refresh_from_db()
    assert (question.priority, question.organisation) == ("p2", None)
    assert AuditEntry.objects.count() == audit_count


def test_a_past_due_date_is_refused_in_the_admin(pm_client):
    question = Question.objects.get(code="V18")
    audit_count = AuditEntry.objects.count()
    url = admin_url(Question, "change", question.pk)
    form = {"priority": "p2", "organisation": "", "assignee": "", "due_date": "1900-01-01"}
    response = pm_client.post(url, form, follow=True)
    assert "Not saved — due_date: The due date 1900-01-01 is in the past" in response.content.decode()
    question.refresh_from_db()
    assert question.due_date is None
    assert AuditEntry.objects.count() == audit_count


def test_a_superuser_edits_questions_as_a_pm_does(client, checklist):
    """One rule for "PM or superuser": the admin's superuser triages as a PM, through the same service."""
    staff = get_user_model().objects.create_superuser("admin-without-team", password=None)
    client.force_login(staff)
    question = Question.objects.get(code="V18")
    response = client.post(
        admin_url(Question, "change", question.pk), {"priority": "p0", "organisation": "", "assignee": ""}
    )
    assert response.status_code == 302
    question.refresh_from_db()
    assert question.priority == "p0"
    assert AuditEntry.objects.filter(action="question.update", actor=staff).count() == 1


def test_token_revoke_action_calls_the_service(pm_client, pm):
    token = ApiToken.objects.get(user=pm)
    response = pm_client.post(
        admin_url(ApiToken, "changelist"), {"action": "revoke", "_selected_action": [token.pk]}, follow=True
    )
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEntry.objects.filter(action="token.revoke", object_id=str(token.pk)).exists()


def test_an_organisation_is_added_through_the_service(pm_client, pm):
    response = pm_client.post(admin_url(Organisation, "add"), {"slug": "newco", "name": "New Co", "kind": "vendor"})
    assert response.status_code == 302
    created = Organisation.objects.get(slug="newco")
    assert (created.name, created.kind) == ("New Co", "vendor")
    entry = AuditEntry.objects.get(action="organisation.create", object_id=str(created.pk))
    assert entry.actor == pm


def test_an_organisation_is_renamed_through_the_service_and_keeps_its_slug(pm_client, pm):
    chipco = Organisation.objects.get(slug="chipco")
    url = admin_url(Organisation, "change", chipco.pk)
    page = pm_client.get(url).content.decode()
    assert 'name="name"' in page and 'name="slug"' not in page and 'name="kind"' not in page
    response = pm_client.post(url, {"name": "Chip Company", "slug": "other", "kind": "integrator"})
    assert response.status_code == 302
    chipco.refresh_from_db()
    assert (chipco.slug, chipco.name, chipco.kind) == ("chipco", "Chip Company", "vendor")
    entry = AuditEntry.objects.get(action="organisation.rename")
    assert (entry.before, entry.after) == ({"name": "Chip Co"}, {"name": "Chip Company"})


def test_a_refused_organisation_changes_nothing(pm_client):
    audit_count = AuditEntry.objects.count()
    response = pm_client.post(
        admin_url(Organisation, "add"), {"slug": "chipco", "name": "Again", "kind": "vendor"}, follow=True
    )
    assert "Not saved" in response.content.decode() or "already exists" in response.content.decode()
    assert Organisation.objects.filter(slug="chipco").count() == 1
    assert AuditEntry.objects.count() == audit_count


def test_the_admins_close_action_refuses_while_deliverables_are_owed(pm_client, pm):
    question = Question.objects.get(code="V18")
    Question.objects.filter(pk=question.pk).update(state="verifying")
    audit_count = AuditEntry.objects.count()
    response = pm_client.post(
        admin_url(Question, "changelist"), {"action": "close", "_selected_action": [question.pk]}, follow=True
    )
    page = response.content.decode()
    assert "V18 cannot be closed while 3 of its deliverables are not accepted" in page
    assert "package-batch-4" in page
    question.refresh_from_db()
    assert question.state == "verifying"
    assert AuditEntry.objects.count() == audit_count


def test_capability_edits_go_through_the_service_with_an_audit_row(pm_client, pm):
    capability = Capability.objects.get(slug="decode-batch-16")
    url = admin_url(Capability, "change", capability.pk)
    questions = sorted(capability.questions.values_list("pk", flat=True))
    v17 = Question.objects.get(code="V17")
    evidence = sorted(capability.evidence.values_list("pk", flat=True))
    audit_count = AuditEntry.objects.count()

    response = pm_client.post(
        url,
        {
            "slug": capability.slug,
            "title": "Decode at batch 16",
            "description": capability.description,
            "scope": capability.scope,
            "position": capability.position,
            "questions": [*questions, v17.pk],
            "evidence": evidence,
            "deliverables": list(capability.deliverables.values_list("pk", flat=True)),
            "status": "C0",
        },  # fmt: skip
    )

    assert response.status_code == 302
    capability.refresh_from_db()
    assert capability.title == "Decode at batch 16" and capability.status != "C0"
    assert v17 in capability.questions.all()
    entry = AuditEntry.objects.order_by("-id").first()
    assert AuditEntry.objects.count() == audit_count + 1
    assert (entry.action, entry.actor) == ("capability.update", pm)
    assert entry.after == {"title": "Decode at batch 16", "questions": sorted([*questions, v17.pk])}
    assert entry.before["questions"] == questions


def test_a_refused_capability_edit_changes_nothing(pm_client):
    capability = Capability.objects.get(slug="decode-batch-16")
    audit_count = AuditEntry.objects.count()
    response = pm_client.post(
        admin_url(Capability, "change", capability.pk),
        {"slug": capability.slug, "title": " ", "position": 0},
        follow=True,
    )
    assert AuditEntry.objects.count() == audit_count
    capability.refresh_from_db()
    assert capability.title.strip()
    assert response.status_code == 200
