"""Organisations, their members and API tokens."""

import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from calculet.actors import SYSTEM, Actor, Machine
from calculet.audit import audit_record
from calculet.db import lock_rows
from calculet.errors import ConflictError, DomainError, ForbiddenError, NotFoundError
from calculet.sentences import Labelled
from vendor.access import may_act_as_pm
from vendor.inputs import MemberDraft, OrganisationDraft
from vendor.models import ApiToken, Membership, Organisation
from vendor.tokens import token_generate_key, token_hash

ROLE_CODES = [code for code, _ in Membership.ROLES]
TOKEN_DEFAULT_LIFETIME = datetime.timedelta(days=90)
TOKEN_MAX_LIFETIME = datetime.timedelta(days=366)


def _role_organisation_kind(role: str) -> str:
    return Organisation.VENDOR if role == Membership.VENDOR else Organisation.INTEGRATOR


def organisation_create(*, actor: Actor, draft: OrganisationDraft) -> Organisation:
    """Create an organisation. `actor` is a PM, or a command run at the shell; the kind is integrator or
    vendor (DomainError on `kind`); the slug is free (ConflictError on `slug`)."""
    if not isinstance(actor, Machine) and not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM creates organisations."))
    if draft.kind not in {Organisation.INTEGRATOR, Organisation.VENDOR}:
        raise DomainError(gettext_noop("The kind is integrator or vendor."), field="kind")
    slug, name, kind = draft.slug, draft.name, draft.kind
    with transaction.atomic():
        if lock_rows(Organisation.objects).filter(slug=slug).exists():
            raise ConflictError(
                gettext_noop("Organisation %(slug)s already exists."), field="slug", params={"slug": slug}
            )
        organisation = Organisation.objects.create(slug=slug, name=name, kind=kind)
        audit_record(actor=actor, action="organisation.create", obj=organisation, after={"slug": slug, "kind": kind})
    return organisation


def organisation_rename(*, actor: Actor, organisation: Organisation, name: str) -> Organisation:
    """Give an organisation a new name (parsed at the edge by `vendor.inputs.organisation_name`); its slug
    and kind never change. `actor` is a PM."""
    if not may_act_as_pm(actor):
        raise ForbiddenError(gettext_noop("Only a PM renames organisations."))
    with transaction.atomic():
        locked = lock_rows(Organisation.objects).get(pk=organisation.pk)
        if locked.name == name:
            return locked
        before = {"name": locked.name}
        locked.name = name
        locked.save(update_fields=["name"])
        audit_record(actor=actor, action="organisation.rename", obj=locked, before=before, after={"name": name})
    return locked


def token_create(*, actor: Actor, user, name: str, expires_at: datetime.datetime | None = None) -> tuple[ApiToken, str]:
    """Create an API token for `user` and return it with its key, which is not stored and never shown again.

    Preconditions: `actor` is the user, or a command run at the shell; `name` is stripped and of 1 to
    `vendor.inputs.TOKEN_NAME_MAX_CHARS` characters (the API's serializer parses it; the other callers name
    the token themselves). Tokens expire: by default after TOKEN_DEFAULT_LIFETIME, at most after TOKEN_MAX_LIFETIME.
    """
    if not isinstance(actor, Machine) and actor.pk != user.pk:
        raise ForbiddenError(gettext_noop("Tokens are created by their own user."))
    now = timezone.now()
    if expires_at is None:
        expires_at = now + TOKEN_DEFAULT_LIFETIME
    if expires_at <= now:
        raise DomainError(gettext_noop("The expiry must be in the future."), field="expires_at")
    if expires_at > now + TOKEN_MAX_LIFETIME:
        raise DomainError(
            gettext_noop("A token lives at most %(days)s days."),
            field="expires_at",
            params={"days": TOKEN_MAX_LIFETIME.days},
        )
    key = token_generate_key()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, prefix=key[:12], key_hash=token_hash(key), expires_at=expires_at
        )
        audit_record(
            actor=actor,
            action="token.create",
            obj=token,
            after={"user": user.get_username(), "name": name, "expires_at": expires_at.isoformat()},
        )
    return token, key


def token_revoke(*, actor: Actor, token: ApiToken) -> ApiToken:
    """Revoke a token for good. Its own user, a PM or a command run at the shell may."""
    if not isinstance(actor, Machine) and actor.pk != token.user_id and not may_act_as_pm(actor):
        raise NotFoundError(gettext_noop("Token %(value)s not found."), params={"value": token.pk})
    with transaction.atomic():
        locked = lock_rows(ApiToken.objects).get(pk=token.pk)
        if locked.revoked_at is not None:
            return locked
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="token.revoke", obj=locked, after={"revoked_at": locked.revoked_at})
    return locked


def api_user_create(
    draft: MemberDraft,
    *,
    token_name: str = "created with the user",
    expires_at: datetime.datetime | None = None,
) -> tuple:
    """Create a user with a membership and a first API token; returns (user, key).

    Preconditions: the role exists; the username is free; the organisation exists, or the draft names the
    one to create (its kind follows the role: vendor engineers belong to vendor organisations,
    pm/operator/viewer to the integration team's).
    """
    username, org_slug, role = draft.username, draft.organisation, draft.role
    if role not in ROLE_CODES:
        raise DomainError(
            gettext_noop("The role is one of: %(roles)s."), field="role", params={"roles": list(ROLE_CODES)}
        )
    user_model = get_user_model()
    with transaction.atomic():
        organisation = Organisation.objects.filter(slug=org_slug).first()
        if organisation is None:
            if draft.new_organisation_name is None:
                raise NotFoundError(
                    gettext_noop("Organisation %(organisation)s not found."),
                    field="org",
                    params={"organisation": org_slug},
                )
            new = OrganisationDraft(slug=org_slug, name=draft.new_organisation_name, kind=_role_organisation_kind(role))
            organisation = organisation_create(actor=SYSTEM, draft=new)
        if organisation.kind != _role_organisation_kind(role):
            raise DomainError(
                gettext_noop(
                    "A %(role)s belongs to an organisation of kind %(wanted_kind)s; %(organisation)s is %(kind)s."
                ),
                field="role",
                params={
                    "role": Labelled("role", role),
                    "wanted_kind": Labelled("organisation_kind", _role_organisation_kind(role)),
                    "organisation": organisation.slug,
                    "kind": Labelled("organisation_kind", organisation.kind),
                },
            )
        if user_model.objects.filter(username=username).exists():
            raise ConflictError(
                gettext_noop("User %(username)s already exists."), field="username", params={"username": username}
            )
        user = user_model.objects.create_user(username=username)
        membership = Membership.objects.create(user=user, organisation=organisation, role=role)
        audit_record(
            actor=SYSTEM,
            action="membership.create",
            obj=membership,
            after={"user": username, "organisation": organisation.slug, "role": role},
        )
        _, key = token_create(actor=SYSTEM, user=user, name=token_name, expires_at=expires_at)
    return user, key
