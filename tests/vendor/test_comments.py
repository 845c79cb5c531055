"""A question's thread: who writes in it, what Markdown may contain, mentions, attachments, revisions, who reads it."""

from html.parser import HTMLParser

import pytest

from calculet.errors import DomainError, ForbiddenError, NotFoundError
from calculet.models import AuditEntry
from tests.factories import db_snapshot, make_account, make_artifact, make_question
from vendor.inputs import CommentDraft, QuestionChanges, comment_draft
from vendor.models import Comment, CommentRevision, NotificationEvent
from vendor.selectors import comment_list
from vendor.services.comments import comment_create, comment_edit
from vendor.services.questions import question_update


def test_a_pm_and_the_vendor_share_the_thread(pm, vendor_a, question_a, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = comment_create(
            actor=pm.user, question=question_a, draft=CommentDraft(body="Which **calbin** answers batch 8?")
        )
        second = comment_create(
            actor=vendor_a.user, question=question_a, draft=CommentDraft(body="The one we uploaded today.")
        )
    assert (first.organisation, second.organisation) == (question_a.organisation, question_a.organisation)
    assert first.body_html == "<p>Which <strong>calbin</strong> answers batch 8?</p>\n"
    assert [c.pk for c in comment_list(user=vendor_a.user, question=question_a)] == [first.pk, second.pk]
    assert [c.pk for c in comment_list(user=pm.user, question=question_a)] == [first.pk, second.pk]
    revision = CommentRevision.objects.get(comment=first)
    assert (revision.revision, revision.body, revision.author) == (1, "Which **calbin** answers batch 8?", pm.user)
    entry = AuditEntry.objects.filter(action="comment.create").order_by("id").first()
    assert entry.after == {
        "question": "V18",
        "body": "Which **calbin** answers batch 8?",
        "artifacts": [],
        "mentions": [],
    }
    # The vendor's answer in the thread tells the PM who wrote before it, and nobody is told of their own words.
    comment_events = NotificationEvent.objects.filter(kind="comment").order_by("id")
    assert [list(e.notifications.values_list("user__username", flat=True)) for e in comment_events] == [
        ["alice"],
        ["pat"],
    ]


@pytest.mark.parametrize(
    "body",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[click](javascript:alert(1))",
        "[click](data:text/html;base64,PHNjcmlwdD4=)",
        '<a href="https://evil.test" onclick="x()">raw</a>',
        "![tracker](https://evil.test/pixel.png)",
        "<iframe src=https://evil.test></iframe>",
    ],
)
def test_no_raw_html_passes(pm, question_a, body):
    elements = Elements()
    elements.feed(comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body=body)).body_html)
    assert {tag for tag, _ in elements.found} <= {"p"}, elements.found
    assert all(not attributes for _, attributes in elements.found), elements.found


class Elements(HTMLParser):
    """The elements a fragment really makes, with their attributes (escaped text makes none)."""

    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def test_links_open_safely_and_markdown_keeps_its_structure(pm, question_a):
    body = "See [the guide](https://example.org/g) and `@alice`:\n\n- one\n- two\n\n```\n<b>code</b>\n```"
    html = comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body=body)).body_html
    assert '<a href="https://example.org/g" rel="noopener noreferrer nofollow">the guide</a>' in html
    assert "<code>@alice</code>" in html and '<span class="mention">' not in html
    assert "<li>one</li>" in html and "<pre><code>&lt;b&gt;code&lt;/b&gt;\n</code></pre>" in html


def test_mentions_mark_and_tell_only_people_who_may_read_the_thread(
    pm, vendor_a, vendor_b, question_a, django_capture_on_commit_callbacks
):
    colleague = make_account("cleo", "team", "viewer")
    with django_capture_on_commit_callbacks(execute=True):
        comment = comment_create(
            actor=pm.user,
            question=question_a,
            draft=CommentDraft(body="@alice @bruno @cleo @nobody, mail x@alice.test."),
        )
    assert sorted(comment.mentions.values_list("username", flat=True)) == ["alice", "cleo"]
    assert '<span class="mention">@alice</span> @bruno <span class="mention">@cleo</span> @nobody' in comment.body_html
    assert "x@alice.test" in comment.body_html
    told = NotificationEvent.objects.get(kind="mention").notifications.values_list("user__username", flat=True)
    assert sorted(told) == ["alice", "cleo"]
    assert not vendor_b.user.notifications.exists()
    assert colleague.user.notifications.count() == 1  # the mention; the comment itself is not told twice


@pytest.mark.parametrize(
    ("body", "artifacts", "field"),
    [
        ("", [], "body"),
        ("   ", [], "body"),
        ("x" * 10_001, [], "body"),
        ("ok", list(range(1, 22)), "artifacts"),
    ],
)
def test_bad_comments_name_the_field(body, artifacts, field):
    with pytest.raises(DomainError) as error:
        comment_draft(body, artifacts)
    assert error.value.field == field


def test_a_comment_is_parsed_stripped():
    assert comment_draft("  hi  ", [3, 4]) == CommentDraft(body="hi", artifacts=(3, 4))


def test_an_artifact_not_the_vendors_names_its_place_and_stores_nothing(pm, question_a):
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body="ok", artifacts=(999_999,)))
    assert (error.value.field, error.value.code) == ("artifacts[0]", "not_found")
    assert db_snapshot() == before


def test_attachments_link_the_vendors_own_artifacts(pm, vendor_a, vendor_b, question_a, artifacts_a, artifacts_b):
    comment = comment_create(
        actor=vendor_a.user,
        question=question_a,
        draft=CommentDraft(body="attached", artifacts=(artifacts_a["calbin"].pk,)),
    )
    assert list(comment.artifacts.all()) == [artifacts_a["calbin"]]
    before = db_snapshot()
    with pytest.raises(DomainError) as error:
        comment_create(
            actor=pm.user,
            question=question_a,
            draft=CommentDraft(body="theirs", artifacts=(artifacts_a["golden"].pk, artifacts_b["golden"].pk)),
        )
    assert (error.value.field, error.value.code) == ("artifacts[1]", "not_found")
    assert db_snapshot() == before
    unasked = make_question("V20")
    with pytest.raises(DomainError) as error:
        comment_create(
            actor=pm.user, question=unasked, draft=CommentDraft(body="x", artifacts=(artifacts_a["golden"].pk,))
        )
    assert error.value.field == "artifacts[0]"


def test_who_may_write(pm, viewer, vendor_a, vendor_b, question_a, question_b):
    with pytest.raises(ForbiddenError):
        comment_create(actor=viewer.user, question=question_a, draft=CommentDraft(body="a viewer reads"))
    with pytest.raises(NotFoundError):
        comment_create(actor=vendor_b.user, question=question_a, draft=CommentDraft(body="not my question"))
    with pytest.raises(NotFoundError):
        comment_create(actor=vendor_a.user, question=make_question("V21"), draft=CommentDraft(body="put to nobody"))
    assert not Comment.objects.exists()


def test_a_vendor_reads_only_threads_of_questions_put_to_it(pm, vendor_a, vendor_b, question_a):
    early = comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body="to acme"))
    assert list(comment_list(user=vendor_b.user, question=question_a)) == []
    # Put to another vendor: acme's thread stays acme's and the team's; bolt starts a thread of its own.
    question_update(
        actor=pm.user, question=question_a, changes=QuestionChanges(organisation=vendor_b.user.membership.organisation)
    )
    question_a.refresh_from_db()
    later = comment_create(actor=vendor_b.user, question=question_a, draft=CommentDraft(body="bolt here"))
    assert [c.pk for c in comment_list(user=vendor_b.user, question=question_a)] == [later.pk]
    assert list(comment_list(user=vendor_a.user, question=question_a)) == []
    assert [c.pk for c in comment_list(user=pm.user, question=question_a)] == [early.pk, later.pk]


def test_edits_keep_every_revision_and_tell_new_mentions_once(
    pm, vendor_a, question_a, artifacts_a, django_capture_on_commit_callbacks
):
    comment = comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body="first"))
    with django_capture_on_commit_callbacks(execute=True):
        comment_edit(
            actor=pm.user,
            comment=comment,
            draft=CommentDraft(body="second, @alice", artifacts=(artifacts_a["golden"].pk,)),
        )
        comment_edit(
            actor=pm.user,
            comment=comment,
            draft=CommentDraft(body="third, @alice", artifacts=(artifacts_a["golden"].pk,)),
        )
    comment.refresh_from_db()
    assert (comment.body, comment.revision, comment.edited_at is not None) == ("third, @alice", 3, True)
    assert list(comment.revisions.values_list("revision", "body")) == [
        (1, "first"),
        (2, "second, @alice"),
        (3, "third, @alice"),
    ]
    assert comment.revisions.get(revision=2).artifact_ids == [artifacts_a["golden"].pk]
    edits = AuditEntry.objects.filter(action="comment.edit").order_by("id")
    assert [(e.before["body"], e.after["body"]) for e in edits] == [
        ("first", "second, @alice"),
        ("second, @alice", "third, @alice"),
    ]
    assert NotificationEvent.objects.filter(kind="mention").count() == 1
    before = db_snapshot()
    comment_edit(
        actor=pm.user,
        comment=comment,
        draft=CommentDraft(body="third, @alice", artifacts=(artifacts_a["golden"].pk,)),
    )
    assert db_snapshot() == before


def test_only_the_author_edits(pm, vendor_a, question_a):
    comment = comment_create(actor=vendor_a.user, question=question_a, draft=CommentDraft(body="mine"))
    colleague = make_account("amy", "acme", "vendor")
    before = db_snapshot()
    for other in (pm.user, colleague.user):
        with pytest.raises(ForbiddenError):
            comment_edit(actor=other, comment=comment, draft=CommentDraft(body="theirs"))
    assert db_snapshot() == before


def test_an_artifact_linked_once_can_be_replaced(vendor_a, question_a):
    first = make_artifact(vendor_a.user, kind="document", version="1", file_name="a.pdf")
    second = make_artifact(vendor_a.user, kind="document", version="2", file_name="a.pdf")
    comment = comment_create(
        actor=vendor_a.user, question=question_a, draft=CommentDraft(body="v1", artifacts=(first.pk,))
    )
    comment_edit(actor=vendor_a.user, comment=comment, draft=CommentDraft(body="v2", artifacts=(second.pk,)))
    assert list(comment.artifacts.all()) == [second]
    assert list(comment.revisions.values_list("artifact_ids", flat=True)) == [[first.pk], [second.pk]]
