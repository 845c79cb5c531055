"""/api/v1/questions/{code}/comments/: the question page's thread over the API."""

import pytest

from calculet.models import AuditEntry
from tests.factories import db_snapshot
from vendor.inputs import CommentDraft
from vendor.services.comments import comment_create


def test_the_team_and_the_vendor_write_and_read_the_thread(pm, vendor_a, question_a, artifacts_a):
    created = pm.client().post(
        "/api/v1/questions/V18/comments/", {"body": "Please link the **golden**, @alice."}, format="json"
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["question"], body["organisation"], body["author"], body["mentions"]) == (
        "V18",
        "acme",
        "pat",
        ["alice"],
    )
    assert body["body_html"] == '<p>Please link the <strong>golden</strong>, <span class="mention">@alice</span>.</p>\n'
    assert (body["revision"], body["edited_at"], len(body["revisions"])) == (1, None, 1)

    reply = vendor_a.client().post(
        "/api/v1/questions/v18/comments/",
        {"body": "Here it is.", "artifacts": [artifacts_a["golden"].pk]},
        format="json",
    )
    assert reply.status_code == 201
    assert reply.json()["artifacts"] == [
        {
            "id": artifacts_a["golden"].pk,
            "kind": "golden",
            "file_name": "golden-b8.npz",
            "version": "0.7.6",
            "state": "verified",
        }
    ]
    listed = vendor_a.client().get("/api/v1/questions/V18/comments/").json()
    assert [c["author"] for c in listed["results"]] == ["pat", "alice"]


def test_an_author_edits_and_the_history_stays(pm, vendor_a, question_a, artifacts_a):
    comment = comment_create(actor=vendor_a.user, question=question_a, draft=CommentDraft(body="first"))
    url = f"/api/v1/questions/V18/comments/{comment.pk}/"
    response = vendor_a.client().patch(url, {"body": "second"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["body"], body["revision"]) == ("second", 2) and body["edited_at"]
    assert [(r["revision"], r["body"], r["author"]) for r in body["revisions"]] == [
        (1, "first", "alice"),
        (2, "second", "alice"),
    ]
    linked = vendor_a.client().patch(url, {"artifacts": [artifacts_a["calbin"].pk]}, format="json").json()
    assert (linked["body"], linked["revision"], [a["id"] for a in linked["artifacts"]]) == (
        "second",
        3,
        [artifacts_a["calbin"].pk],
    )
    assert vendor_a.client().get(url).json()["revision"] == 3
    assert AuditEntry.objects.filter(action="comment.edit").count() == 2


@pytest.mark.parametrize(
    ("payload", "field", "code"),
    [
        ({}, "body", "required"),
        ({"body": ""}, "body", "blank"),
        ({"body": "x" * 10_001}, "body", "max_length"),
        ({"body": "ok", "artifacts": ["x"]}, "artifacts[0]", "invalid"),
        ({"body": "ok", "artifacts": [424242]}, "artifacts[0]", "not_found"),
        ({"body": "ok", "colour": "red"}, "colour", "invalid"),
        ({"body": ["ok"]}, "body", "invalid"),
    ],
)
def test_bad_comments_are_refused_naming_the_field(pm, question_a, payload, field, code):
    before = db_snapshot()
    response = pm.client().post("/api/v1/questions/V18/comments/", payload, format="json")
    assert response.status_code == 400
    assert (response.json()["errors"][0]["field"], response.json()["errors"][0]["code"]) == (field, code)
    assert db_snapshot() == before


def test_a_vendor_never_reaches_another_vendors_thread(pm, vendor_a, vendor_b, question_a, question_b):
    comment = comment_create(actor=pm.user, question=question_a, draft=CommentDraft(body="for acme"))
    before = db_snapshot()
    client = vendor_b.client()
    assert client.get("/api/v1/questions/V18/comments/").status_code == 404
    assert client.get(f"/api/v1/questions/V18/comments/{comment.pk}/").status_code == 404
    assert client.get(f"/api/v1/questions/V19/comments/{comment.pk}/").status_code == 404
    assert client.post("/api/v1/questions/V18/comments/", {"body": "hi"}, format="json").status_code == 404
    assert (
        client.patch(f"/api/v1/questions/V18/comments/{comment.pk}/", {"body": "x"}, format="json").status_code == 404
    )
    assert client.get("/api/v1/questions/V19/comments/").json()["count"] == 0
    assert db_snapshot() == before


def test_who_may_write_and_edit(pm, viewer, vendor_a, question_a):
    comment = comment_create(actor=vendor_a.user, question=question_a, draft=CommentDraft(body="mine"))
    before = db_snapshot()
    assert viewer.client().get("/api/v1/questions/V18/comments/").json()["count"] == 1
    assert viewer.client().post("/api/v1/questions/V18/comments/", {"body": "hi"}, format="json").status_code == 403
    refused = pm.client().patch(f"/api/v1/questions/V18/comments/{comment.pk}/", {"body": "x"}, format="json")
    assert refused.status_code == 403
    assert db_snapshot() == before
