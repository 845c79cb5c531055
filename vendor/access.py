"""Who may see and do what: the one place that decides it, for pages, the API, services and tasks alike.

Members of the integration team's organisation (roles pm, operator, viewer) see every question, answer,
artifact and run; a vendor organisation's members see only what belongs to their organisation. What
"belongs" means is written once per model in `VISIBILITY`, as the organisation fields that must all be
the user's organisation. Other apps' models are named by label so that this module, at the bottom of
the apps, imports none of them (docs/architecture.md).

`objects_for_user` narrows a queryset to what the user may see; `object_for_user` fetches one object and
raises `NotFoundError` (an `Http404` too) for a missing object and another organisation's alike, so a
response never tells the two apart. The `may_*` predicates answer everything else.
"""

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import Manager, Q, QuerySet
from django.utils.text import capfirst
from django.utils.translation import gettext_noop

from calculet.actors import Actor
from calculet.errors import NotFoundError
from vendor.models import Membership, Organisation


def user_membership(user: Actor | None) -> Membership | None:
    if not isinstance(user, User) or not user.is_active:
        return None
    try:
        return user.membership
    except Membership.DoesNotExist:
        return None


def user_role(user) -> str | None:
    membership = user_membership(user)
    return membership.role if membership is not None else None


def user_organisation(user) -> Organisation | None:
    membership = user_membership(user)
    return membership.organisation if membership is not None else None


def may_open_pages(user) -> bool:
    """Anyone with a membership: the team, and vendor engineers read-only."""
    return user_membership(user) is not None


def may_see_all(user) -> bool:
    """Members of the integration team's organisation (roles pm, operator, viewer)."""
    membership = user_membership(user)
    return (
        membership is not None
        and membership.organisation.kind == Organisation.INTEGRATOR
        and membership.role != Membership.VENDOR
    )


def is_vendor_member(user) -> bool:
    return may_open_pages(user) and not may_see_all(user)


def may_act_as_pm(user) -> bool:
    """A PM of the integration team, or a superuser (who works in the admin): triage, re-runs, promotions."""
    if isinstance(user, User) and user.is_active and user.is_superuser:
        return True
    return may_see_all(user) and user_role(user) == Membership.PM


def may_approve_moves(user) -> bool:
    """Who may approve a move that needs two approvals (a capability the seed keeps closed, a pinned one to or
    from C4): a PM or an operator of the integration team, each approving as themselves (never a superuser
    without a membership, a viewer or a vendor)."""
    return may_see_all(user) and user_role(user) in (Membership.PM, Membership.OPERATOR)


def may_read_audit(user) -> bool:
    """The audit log names every organisation's objects: PMs only, in the browser and the API alike."""
    return may_act_as_pm(user)


def may_answer(user) -> bool:
    return user_role(user) == Membership.VENDOR


def may_discuss(user) -> bool:
    """Who writes in a question's thread: the team's PMs, and the engineers of the vendor it is put to (which
    question a vendor may reach, `object_for_user` decides)."""
    return may_act_as_pm(user) or may_answer(user)


def may_edit_comment(user, comment) -> bool:
    """Only its author edits a comment (whether they may still write in its thread is `may_discuss`'s)."""
    return comment.author_id is not None and comment.author_id == getattr(user, "pk", None)


def may_be_told(user, *, organisation_id: int | None) -> bool:
    """Whether the user may be told of an event about a vendor's work (`organisation_id`; None for the team's
    own decisions): the integration team of everything, a vendor's members only of their own organisation's."""
    if may_see_all(user):
        return True
    membership = user_membership(user)
    return membership is not None and organisation_id is not None and membership.organisation_id == organisation_id


def may_manage_webhooks(user) -> bool:
    """Webhooks carry every organisation's events to outside systems: PMs only."""
    return may_act_as_pm(user)


@dataclass(frozen=True)
class Visibility:
    """Who outside the integration team sees a model's rows: those whose `owners` fields all name the
    user's organisation. `team_sees_all` False keeps rows private to their organisation, team included;
    `public_when_unowned` True lets everyone see the rows whose `owners` fields are all empty."""

    owners: tuple[str, ...]
    team_sees_all: bool = True
    public_when_unowned: bool = False


VISIBILITY: dict[str, Visibility] = {
    "vendor.organisation": Visibility(owners=("pk",)),
    "vendor.question": Visibility(owners=("organisation",)),
    # A question once put to another vendor keeps that vendor's answers, chains and runs: theirs alone.
    "vendor.answer": Visibility(owners=("organisation", "question__organisation")),
    "vendor.artifact": Visibility(owners=("organisation",)),
    "vendor.upload": Visibility(owners=("organisation",), team_sees_all=False),
    # A thread is the team's and the vendor's it was written with, while the question is still put to them.
    "vendor.comment": Visibility(owners=("organisation", "question__organisation")),
    "acceptance.chain": Visibility(owners=("answer__organisation", "question__organisation")),
    "acceptance.run": Visibility(owners=("answer__organisation", "chain__question__organisation")),
    # What a vendor's runs, checks and reviews found is theirs; the seed's evidence (no organisation) is public.
    "evidence.evidenceitem": Visibility(owners=("organisation",), public_when_unowned=True),
}


def objects_for_user(user, rows: QuerySet | Manager) -> QuerySet:
    """The rows of `rows` the user may see."""
    queryset = rows.all()
    visibility = VISIBILITY[queryset.model._meta.label_lower]
    if visibility.team_sees_all and may_see_all(user):
        return queryset
    membership = user_membership(user)
    if membership is None:
        return queryset.none()
    visible = Q(**dict.fromkeys(visibility.owners, membership.organisation_id))
    if visibility.public_when_unowned:
        visible |= Q(**{f"{owner}__isnull": True for owner in visibility.owners})
    return queryset.filter(visible)


# What a page or the API looks up by id, each named in the reader's language.
NOT_FOUND = {
    "question": gettext_noop("Question %(value)s not found."),
    "answer": gettext_noop("Answer %(value)s not found."),
    "artifact": gettext_noop("Artifact %(value)s not found."),
    "upload": gettext_noop("Upload %(value)s not found."),
    "comment": gettext_noop("Comment %(value)s not found."),
    "run": gettext_noop("Run %(value)s not found."),
}


def object_for_user(user, rows: QuerySet | Manager, **lookup):
    """The one row matching `lookup` that the user may see; NotFoundError for missing and not-yours alike."""
    try:
        found = objects_for_user(user, rows).filter(**lookup).first()
    except (TypeError, ValueError, ValidationError):  # an id of the wrong shape matches nothing
        found = None
    if found is None:
        meta = rows.model._meta
        raise NotFoundError(
            NOT_FOUND.get(meta.model_name, gettext_noop("%(model)s %(value)s not found.")),
            params={"model": capfirst(meta.verbose_name), "value": " ".join(str(value) for value in lookup.values())},
        )
    return found
