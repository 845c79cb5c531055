"""The API answers every request in its own error format, never with an HTML page or a 500."""

import ipaddress

import pytest
from rest_framework.test import APIClient

from tests.factories import db_snapshot, make_question
from vendor.authentication import client_address


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/nowhere/"),
        ("post", "/api/v1/nowhere/"),
        ("get", "/api/v1/questions/%00/"),
        ("get", "/api/v1/questions/V18%0A/answers/"),
        ("get", "/api/v1/evidence/%00/"),
        ("get", "/api/v1/artifacts/abc/"),
        ("patch", "/api/v1/uploads/not-a-uuid/"),
        ("get", "/api/v1/capabilities/a%00b/"),
    ],
)
def test_no_endpoint_is_a_json_404(pm, method, path):
    response = getattr(pm.client(), method)(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"][0]["code"] == "not_found"


def test_offsets_postgresql_refuses_are_turned_into_utc(pm):
    make_question("V18")
    response = pm.client().get("/api/v1/audit/", {"created_after": "0109-02-26T21:01:34+21:46"})
    assert response.status_code == 200
    response = pm.client().get("/api/v1/audit/", {"created_after": "0001-01-01T00:00:00+01:00"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "created_after"


@pytest.mark.parametrize("name", ["a\u0000b", "x" * 101, "with space"])
def test_odd_names_in_answer_maps_are_refused(vendor_a, question_a, name):
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", {"thresholds": {name: 1.0}}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "thresholds"


DEEP_JSON = "[" * 1000 + "]" * 1000


@pytest.mark.parametrize(
    ("account", "method", "path"),
    [
        ("vendor_a", "post", "/api/v1/questions/V18/answers/"),
        ("pm", "patch", "/api/v1/questions/V18/"),
        ("pm", "post", "/api/v1/capabilities/decode-batch-8/promotions/"),
    ],
)
def test_deeply_nested_json_is_a_clean_400_that_changes_nothing(request, question_a, capability, account, method, path):
    client = request.getfixturevalue(account).client()
    before = db_snapshot()
    response = getattr(client, method)(path, DEEP_JSON, content_type="application/json")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "nested deeper" in response.json()["errors"][0]["message"]
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("body", "field", "key"),
    [
        ('{"summary": "first", "summary": "second"}', "summary", "summary"),
        # Nested, the path names it (it used to be the bare key, `max_abs`, whichever object held it).
        ('{"thresholds": {"max_abs": 0.1, "max_abs": 0.5}}', "thresholds.max_abs", "max_abs"),
        ('{"golden": {"tolerances": {"max_abs": 0.1, "max_abs": 0.5}}}', "golden.tolerances.max_abs", "max_abs"),
        (
            '{"summary": "s", "error_paths": [{"scenario": "a", "expect_code": 1}, '
            '{"scenario": "a", "scenario": "b", "expect_code": 2}]}',
            "error_paths[1].scenario",
            "scenario",
        ),
        ('{"summary": "s", "x": [[{"k": 1}, {"k": 1, "k": 2}]]}', "x[0][1].k", "k"),
    ],
)
def test_a_key_repeated_in_one_object_is_a_400_naming_it(vendor_a, question_a, body, field, key):
    before = db_snapshot()
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": field, "code": "duplicate_key", "message": f"The key {key!r} appears more than once in one object."}
    ]
    assert db_snapshot() == before


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_a_400(vendor_a, question_a, constant):
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/",
        f'{{"thresholds": {{"max_abs": {constant}}}}}',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["errors"][0]["message"]


def test_brackets_inside_strings_do_not_count_as_nesting(vendor_a, question_a):
    response = vendor_a.client().post(
        "/api/v1/questions/V18/answers/", {"summary": "[" * 500 + '"\\' + "{" * 500}, format="json"
    )
    assert response.status_code == 201


@pytest.mark.parametrize("content_type", ["multipart/form-data; boundary=x", "application/x-www-form-urlencoded"])
def test_json_operations_take_json_only(vendor_a, question_a, content_type):
    response = vendor_a.client().post("/api/v1/questions/V18/answers/", "summary=x", content_type=content_type)
    assert response.status_code == 415
    assert response.json()["errors"][0]["code"] == "unsupported_media_type"


@pytest.fixture
def database_away(db):
    """The database really unreachable: the connection is closed and pointed at a port nobody listens on."""
    from django.db import connection

    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"
    yield
    connection.close()
    connection.settings_dict["PORT"] = port


def test_a_database_outage_is_a_503_with_retry_after(pm, question_a, database_away):
    response = pm.client().get("/api/v1/questions/")
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response.json()["errors"][0]["code"] == "unavailable"


@pytest.fixture
def signed_in(client, pm):
    client.force_login(pm.user)
    return client


def test_a_database_outage_on_a_page_is_a_503_too(signed_in, database_away):
    response = signed_in.get("/questions/")
    assert response.status_code == 503
    assert response["Retry-After"] == "30"


def guesses(client, count: int, **extra) -> list[int]:
    return [client.get("/api/v1/questions/", **extra).status_code for _ in range(count)]


def test_guessed_keys_are_throttled_per_address_and_never_lock_out_a_good_key(pm, question_a):
    guesser = APIClient(REMOTE_ADDR="203.0.113.7")
    guesser.credentials(HTTP_AUTHORIZATION="Token not-a-real-key")
    assert guesses(guesser, 20) == [401] * 20
    refused = guesser.get("/api/v1/questions/")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    # Another wrong key of the same shape from the address is refused too; a good key from it is not.
    guesser.credentials(HTTP_AUTHORIZATION="Token clt_another-guess")
    assert guesser.get("/api/v1/questions/").status_code == 429
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {pm.key}")
    assert guesser.get("/api/v1/questions/").status_code == 200
    assert (
        APIClient(REMOTE_ADDR="203.0.113.8").get("/api/v1/questions/", HTTP_AUTHORIZATION="Token x").status_code == 401
    )


def test_guessing_the_rest_of_a_real_prefix_locks_out_only_that_prefix(pm, vendor_a, question_a):
    guesser = APIClient(REMOTE_ADDR="203.0.113.7")
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {pm.key[:12]}wrong")
    assert guesses(guesser, 20) == [401] * 20
    assert guesser.get("/api/v1/questions/").status_code == 429
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {pm.key}")
    assert guesser.get("/api/v1/questions/").status_code == 429  # the prefix under attack, from this address
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {vendor_a.key}")
    assert guesser.get("/api/v1/questions/").status_code == 200
    other = APIClient(REMOTE_ADDR="203.0.113.8")
    other.credentials(HTTP_AUTHORIZATION=f"Token {pm.key}")
    assert other.get("/api/v1/questions/").status_code == 200


def test_a_client_set_forwarded_for_escapes_no_limit(settings, question_a):
    settings.TRUSTED_PROXIES = []  # reached directly: the header is the client's own
    guesser = APIClient(REMOTE_ADDR="203.0.113.7")
    guesser.credentials(HTTP_AUTHORIZATION="Token not-a-real-key")
    statuses = [
        guesser.get("/api/v1/questions/", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code for n in range(25)
    ]
    assert statuses == [401] * 20 + [429] * 5


def test_an_ipv6_client_cannot_escape_the_limit_by_moving_through_its_own_64(question_a):
    """One IPv6 client holds 2**64 addresses of its /64: 25 guesses from 25 of them used to be 25 401s."""
    statuses = [
        APIClient(REMOTE_ADDR=f"2001:db8:1:2::{n:x}").get("/api/v1/questions/", HTTP_AUTHORIZATION="Token bad")
        for n in range(1, 26)
    ]
    assert [response.status_code for response in statuses] == [401] * 20 + [429] * 5
    other = APIClient(REMOTE_ADDR="2001:db8:1:3::1")  # the next /64: another client
    assert other.get("/api/v1/questions/", HTTP_AUTHORIZATION="Token bad").status_code == 401


def test_behind_a_trusted_proxy_each_client_is_counted_by_the_address_the_proxy_saw(settings, pm, question_a):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32")]
    proxied = APIClient(REMOTE_ADDR="127.0.0.1")
    # The guesser's own X-Forwarded-For value comes first; nginx appends the address it saw.
    bad = {"HTTP_AUTHORIZATION": "Token not-a-real-key", "HTTP_X_FORWARDED_FOR": "198.51.100.9, 203.0.113.7"}
    assert guesses(proxied, 20, **bad) == [401] * 20
    assert proxied.get("/api/v1/questions/", **bad).status_code == 429
    varied = {**bad, "HTTP_X_FORWARDED_FOR": "198.51.100.10, 203.0.113.7"}
    assert proxied.get("/api/v1/questions/", **varied).status_code == 429
    # Another client behind the same proxy is not locked out, with a wrong key or a good one.
    other = {"HTTP_AUTHORIZATION": "Token not-a-real-key", "HTTP_X_FORWARDED_FOR": "203.0.113.8"}
    assert proxied.get("/api/v1/questions/", **other).status_code == 401
    good = {"HTTP_AUTHORIZATION": f"Token {pm.key}", "HTTP_X_FORWARDED_FOR": "203.0.113.8"}
    assert proxied.get("/api/v1/questions/", **good).status_code == 200


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("203.0.113.7", "198.51.100.1", "203.0.113.7"),  # not a trusted proxy: its header is ignored
        ("127.0.0.1", "198.51.100.1, 203.0.113.7", "203.0.113.7"),
        ("127.0.0.1", "203.0.113.7, 10.0.0.2", "203.0.113.7"),  # 10.0.0.2 is a trusted proxy too
        ("127.0.0.1", "", "127.0.0.1"),
        ("127.0.0.1", "not-an-address, 203.0.113.7", "203.0.113.7"),
        ("127.0.0.1", "203.0.113.7, garbage", "127.0.0.1"),
        # An IPv6 client is its /64, directly or through the proxy; an IPv4-mapped peer is its IPv4.
        ("2001:db8:1:2:3:4:5:6", "", "2001:db8:1:2::/64"),
        ("127.0.0.1", "2001:db8:1:2::ffff", "2001:db8:1:2::/64"),
        ("::ffff:127.0.0.1", "203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.9", "198.51.100.1", "203.0.113.9"),
    ],
)
def test_client_address(rf, settings, peer, forwarded, expected):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8")]
    request = rf.get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected
