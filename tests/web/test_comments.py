"""The discussion on the question page: with htmx in place, and as plain forms without JavaScript."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from calculet.models import AuditEntry
from tests.factories import make_user, put_to
from vendor.inputs import CommentDraft
from vendor.models import Comment, Question
from vendor.services.comments import comment_create

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def v18(pm, acme, checklist):
    put_to(pm, acme, "V18", ask=True)


@pytest.mark.django_db
def test_a_comment_without_javascript_lands_back_on_the_page(pm_client, v18):
    response = pm_client.post(reverse("comment-thread", args=["V18"]), {"body": "Is **batch 16** coming?"})
    comment = Comment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/questions/V18/#comment-{comment.pk}"
    page = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    assert f'<article class="comment" id="comment-{comment.pk}">' in page
    assert "<p>Is <strong>batch 16</strong> coming?</p>" in page


@pytest.mark.django_db
def test_a_comment_with_htmx_comes_back_as_the_thread(pm_client, v18):
    response = pm_client.post(reverse("comment-thread", args=["V18"]), {"body": "hello"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section class="panel" id="comment-thread"')
    assert "<p>hello</p>" in body and "<html" not in body


@pytest.mark.django_db
def test_a_refused_comment_keeps_what_was_typed_and_says_why(pm_client, v18):
    response = pm_client.post(reverse("comment-thread", args=["V18"]), {"body": "  "})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Write something." in body and "<html" in body
    long = "长" * 10_001
    response = pm_client.post(reverse("comment-thread", args=["V18"]), {"body": long}, **HTMX)
    body = response.content.decode()
    assert "A comment holds at most 10000 characters (this one has 10001)." in body
    assert long in body and ">10001/10000</span>" in body
    chinese = pm_client.post(
        reverse("comment-thread", args=["V18"]), {"body": long}, HTTP_ACCEPT_LANGUAGE="zh-hans", **HTMX
    ).content.decode()
    assert "评论最多 10000 个字符（这条有 10001 个）。" in chinese and "A comment holds" not in chinese
    response = pm_client.post(reverse("comment-thread", args=["V18"]), {"body": "x", "artifacts": "abc"}, **HTMX)
    assert "Choose artifacts from the list." in response.content.decode()
    assert not Comment.objects.exists()
    assert not AuditEntry.objects.filter(action="comment.create").exists()


@pytest.mark.django_db
def test_editing_without_javascript_keeps_the_history(pm_client, pm, v18):
    comment = comment_create(actor=pm, question=Question.objects.get(code="V18"), draft=CommentDraft(body="first take"))
    edit_url = reverse("comment-edit", args=["V18", comment.pk])
    form_page = pm_client.get(edit_url).content.decode()
    assert 'id="comment-edit-body"' in form_page and "first take</textarea>" in form_page
    response = pm_client.post(edit_url, {"body": "second take"})
    assert response.status_code == 302 and response["Location"].endswith(f"#comment-{comment.pk}")
    page = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    assert ">edited</span>" in page and "History: 2 versions" in page
    assert '<pre class="comment-source">first take</pre>' in page and "<p>second take</p>" in page


@pytest.mark.django_db
def test_editing_with_htmx_swaps_the_comment_for_its_form(pm_client, pm, v18):
    comment = comment_create(actor=pm, question=Question.objects.get(code="V18"), draft=CommentDraft(body="draft"))
    response = pm_client.get(reverse("comment-edit", args=["V18", comment.pk]), **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith(f'<article class="comment" id="comment-{comment.pk}">')
    assert "draft</textarea>" in body
    refused = pm_client.post(reverse("comment-edit", args=["V18", comment.pk]), {"body": ""}, **HTMX)
    assert "Write something." in refused.content.decode()
    assert Comment.objects.get().body == "draft"


@pytest.mark.django_db
def test_only_the_author_is_offered_the_edit_and_others_are_refused(client, pm, acme_engineer, v18):
    comment = comment_create(actor=pm, question=Question.objects.get(code="V18"), draft=CommentDraft(body="the PM's"))
    client.force_login(acme_engineer)
    page = client.get(reverse("question-detail", args=["V18"])).content.decode()
    assert "the PM&#x27;s" in page or "the PM's" in page
    assert reverse("comment-edit", args=["V18", comment.pk]) not in page
    assert 'id="comment-new-body"' in page  # the vendor writes in its own question's thread
    assert client.get(reverse("comment-edit", args=["V18", comment.pk])).status_code == 404  # no form for it
    response = client.post(reverse("comment-edit", args=["V18", comment.pk]), {"body": "changed"})
    assert response.status_code == 403
    assert Comment.objects.get().body == "the PM's"


@pytest.mark.django_db
def test_another_vendor_and_a_viewer_cannot_write(client, pm, other_engineer, v18):
    client.force_login(other_engineer)
    assert client.get(reverse("question-detail", args=["V18"])).status_code == 404
    assert client.post(reverse("comment-thread", args=["V18"]), {"body": "hi"}).status_code == 404
    viewer = make_user("victor", "team", "viewer")
    client.force_login(viewer)
    page = client.get(reverse("question-detail", args=["V18"])).content.decode()
    assert 'id="comment-thread"' in page and 'id="comment-new-body"' not in page
    assert client.post(reverse("comment-thread", args=["V18"]), {"body": "hi"}).status_code == 403
    assert not Comment.objects.exists()


@pytest.mark.django_db
def test_the_thread_speaks_chinese(pm_client, pm, v18):
    comment_create(
        actor=pm, question=Question.objects.get(code="V18"), draft=CommentDraft(body="请提供 batch 16 的 calbin")
    )
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    page = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    assert "讨论" in page and "<p>请提供 batch 16 的 calbin</p>" in page and "发表评论" in page


@pytest.mark.django_db
def test_the_edit_page_reads_the_thread_once_and_its_queries_do_not_grow(
    pm_client, pm, acme_engineer, v18, django_assert_num_queries
):
    """Without JavaScript the edit form comes inside the whole question page: the comment being edited is read,
    then the thread once (it was read twice, the page's own copy thrown away), whatever the thread's length."""
    question = Question.objects.get(code="V18")
    comment = comment_create(actor=pm, question=question, draft=CommentDraft(body="first take"))
    edit_url = reverse("comment-edit", args=["V18", comment.pk])
    with CaptureQueriesContext(connection) as few:
        assert pm_client.get(edit_url).status_code == 200
    comment_reads = [query for query in few.captured_queries if query["sql"].startswith('SELECT "vendor_comment"."id"')]
    assert len(comment_reads) == 2
    for number in range(5):
        comment_create(actor=acme_engineer, question=question, draft=CommentDraft(body=f"answer {number}"))
    with django_assert_num_queries(len(few.captured_queries)):
        page = pm_client.get(edit_url).content.decode()
    assert "first take</textarea>" in page and page.count('<article class="comment"') == 6
