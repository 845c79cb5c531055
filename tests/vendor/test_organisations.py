import datetime
import io

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from calculet.errors import DomainError, ForbiddenError, NotFoundError
from vendor.inputs import OrganisationDraft, member_draft, organisation_draft
from vendor.models import ApiToken, Membership, Organisation
from vendor.services.organisations import organisation_create, token_create, token_revoke
from vendor.tokens import token_hash


def create_api_user(*args) -> str:
    out = io.StringIO()
    call_command("create_api_user", *args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.django_db
def test_the_command_creates_user_organisation_and_a_token_shown_once(client):
    key = create_api_user("alice", "--org", "acme", "--role", "vendor", "--create-org")
    membership = Membership.objects.select_related("organisation").get(user__username="alice")
    assert (membership.role, membership.organisation.slug, membership.organisation.kind) == ("vendor", "acme", "vendor")
    token = ApiToken.objects.get(user__username="alice")
    assert token.key_hash == token_hash(key)
    assert key not in str(list(ApiToken.objects.values()))  # only the hash is stored
    response = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 200
    assert response.json() == {
        "username": "alice",
        "organisation": "acme",
        "organisation_kind": "vendor",
        "role": "vendor",
    }


@pytest.mark.django_db
def test_the_command_refuses_a_missing_organisation_and_a_role_of_the_wrong_kind():
    with pytest.raises(CommandError, match="org"):
        create_api_user("alice", "--org", "acme", "--role", "vendor")
    create_api_user("pat", "--org", "team", "--role", "pm", "--create-org")
    with pytest.raises(CommandError, match="role"):
        create_api_user("alice", "--org", "team", "--role", "vendor")
    with pytest.raises(CommandError, match="username"):
        create_api_user("pat", "--org", "team", "--role", "viewer")
    assert list(Organisation.objects.values_list("slug", flat=True)) == ["team"]


def test_tokens_expire_within_a_year_and_belong_to_their_user(pm, vendor_a):
    with pytest.raises(DomainError) as error:
        token_create(actor=vendor_a.user, user=vendor_a.user, name="ci", expires_at=timezone.now())
    assert error.value.field == "expires_at"
    with pytest.raises(DomainError):
        token_create(
            actor=vendor_a.user,
            user=vendor_a.user,
            name="ci",
            expires_at=timezone.now() + datetime.timedelta(days=400),
        )
    with pytest.raises(ForbiddenError):
        token_create(actor=pm.user, user=vendor_a.user, name="ci")
    token, key = token_create(actor=vendor_a.user, user=vendor_a.user, name="ci")
    assert token.expires_at > timezone.now() + datetime.timedelta(days=89)
    assert key.startswith(token.prefix)


def test_a_token_is_revoked_by_its_user_or_a_pm_only(pm, vendor_a, vendor_b):
    token = ApiToken.objects.get(user=vendor_a.user)
    with pytest.raises(NotFoundError):
        token_revoke(actor=vendor_b.user, token=token)
    token.refresh_from_db()
    assert token.revoked_at is None
    token_revoke(actor=pm.user, token=token)
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_organisations_are_created_by_a_pm_with_a_free_slug_and_a_known_kind(pm, vendor_a):
    zeta = OrganisationDraft(slug="zeta", name="Zeta", kind="vendor")
    with pytest.raises(ForbiddenError):
        organisation_create(actor=vendor_a.user, draft=zeta)
    with pytest.raises(DomainError) as error:
        organisation_create(actor=pm.user, draft=OrganisationDraft(slug="zeta", name="Zeta", kind="maker"))
    assert error.value.field == "kind"
    with pytest.raises(DomainError) as error:
        organisation_create(actor=pm.user, draft=OrganisationDraft(slug="acme", name="Acme again", kind="vendor"))
    assert error.value.field == "slug"
    assert organisation_create(actor=pm.user, draft=zeta).kind == "vendor"


@pytest.mark.parametrize(
    ("parse", "field"),
    [
        (lambda: organisation_draft("Not A Slug", "Zeta", "vendor"), "slug"),
        (lambda: organisation_draft("-zeta", "Zeta", "vendor"), "slug"),
        (lambda: organisation_draft("zeta", "   ", "vendor"), "name"),
        (lambda: organisation_draft("zeta", "x" * 201, "vendor"), "name"),
        (lambda: member_draft("bad name", "acme", "vendor"), "username"),
        (lambda: member_draft("x" * 151, "acme", "vendor"), "username"),
        (lambda: member_draft("bob", "Bad Slug", "vendor", create_org=True), "slug"),
        (lambda: member_draft("bob", "newco", "vendor", create_org=True, org_name="   "), "name"),
    ],
)
def test_organisation_and_member_fields_are_parsed_once_naming_the_field(parse, field):
    with pytest.raises(DomainError) as error:
        parse()
    assert error.value.field == field


def test_a_member_s_new_organisation_is_named_after_its_slug_unless_named():
    assert member_draft("bob", "newco", "vendor", create_org=True).new_organisation_name == "newco"
    assert (
        member_draft("bob", "newco", "vendor", create_org=True, org_name=" New Co ").new_organisation_name == "New Co"
    )
    assert member_draft("bob", "Any Slug", "vendor").new_organisation_name is None  # it must exist: looked up
