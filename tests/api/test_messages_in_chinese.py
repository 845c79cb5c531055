"""The API's own refusals (query parameters, the agent's protocol) speak the client's Accept-Language, and a
list inside a refusal is joined the way that language lists: Chinese with "、", English with ", "."""

import pytest
from django.utils.translation import override
from rest_framework.test import APIClient

from calculet.errors import DomainError
from vendor.inputs import QuestionChanges
from vendor.services.questions import question_update

CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


def _messages(response) -> list[tuple[str, str]]:
    assert response.status_code in (400, 401), response.content
    return [(error["field"], error["message"]) for error in response.json()["errors"]]


def test_a_query_parameter_refusal_reads_in_chinese(vendor_a, question_a):
    client = vendor_a.client()
    response = client.get("/api/v1/questions/?bogus=1&page_size=500", **CHINESE)
    assert _messages(response) == [("bogus", "未知的查询参数。"), ("page_size", "1 到 200 之间的整数。")]
    english = client.get("/api/v1/questions/?bogus=1&page_size=500")
    assert _messages(english) == [("bogus", "Unknown query parameter."), ("page_size", "A whole number from 1 to 200.")]


@pytest.mark.django_db
def test_the_agent_apis_refusal_of_an_unknown_token_reads_in_chinese():
    client = APIClient()
    sent = {"data": "{}", "content_type": "application/json", "HTTP_AUTHORIZATION": "Target clt_target_guessed"}
    chinese = client.post("/api/v1/agent/claim/", **sent, **CHINESE)
    assert _messages(chinese) == [(None, "该 target 令牌未知或已被吊销。")]
    assert _messages(client.post("/api/v1/agent/claim/", **sent)) == [(None, "The target token is unknown or revoked.")]


def test_a_list_in_a_refusal_is_joined_with_the_chinese_enumeration_comma(pm, question_a):
    """The states a question may take are kept as a list in the refusal and joined when it is read."""
    with pytest.raises(DomainError) as refused:
        question_update(actor=pm.user, question=question_a, changes=QuestionChanges(state="nonsense"))
    assert refused.value.sentence["params"]["states"][:3] == ["new", "asked", "answered"]
    with override("zh-hans"):
        assert "new、asked、answered" in refused.value.message and ", " not in refused.value.message
    assert "new, asked, answered" in refused.value.english
