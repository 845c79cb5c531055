"""The login page is held to the failed-token limit: a password cannot be guessed there at request speed and
the API then used with the session, and other people's wrong guesses never refuse a good password."""

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import PASSWORD, make_account


def sign_in(address: str, username: str, password: str):
    return Client(REMOTE_ADDR=address).post(reverse("login"), {"username": username, "password": password})


@pytest.mark.django_db
def test_guessing_a_password_is_refused_after_the_limit_and_only_for_that_name_at_that_address():
    make_account("pat", "team", "pm")
    make_account("vera", "team", "viewer")
    guesses = [sign_in("203.0.113.7", "pat", f"guess-{n}").status_code for n in range(20)]
    assert guesses == [200] * 20  # the form again, with its error
    refused = sign_in("203.0.113.7", "pat", "guess-21")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "Too many failed sign-ins" in refused.content.decode()
    # Even the right password, for the name under attack from this address; not from another address.
    assert sign_in("203.0.113.7", "pat", PASSWORD).status_code == 429
    assert sign_in("203.0.113.8", "pat", PASSWORD).status_code == 302
    # Another person at the guesser's address signs in.
    assert sign_in("203.0.113.7", "vera", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_guessing_many_names_from_one_address_is_held_to_the_same_limit():
    make_account("pat", "team", "pm")
    guesses = [sign_in("203.0.113.7", f"user{n}", "wrong").status_code for n in range(20)]
    assert guesses == [200] * 20
    assert sign_in("203.0.113.7", "user99", "wrong").status_code == 429
    assert sign_in("203.0.113.7", "pat", PASSWORD).status_code == 302  # a good password is not refused


@pytest.mark.django_db
def test_the_admins_login_is_held_to_the_same_limit():
    root = make_account("root", "team", "pm").user
    root.is_staff = True
    root.save(update_fields=["is_staff"])
    guesser = Client(REMOTE_ADDR="203.0.113.7")
    url = reverse("admin:login")
    guesses = [guesser.post(url, {"username": "root", "password": f"guess-{n}"}).status_code for n in range(20)]
    assert guesses == [200] * 20
    refused = guesser.post(url, {"username": "root", "password": PASSWORD})
    assert refused.status_code == 200 and "Too many failed sign-ins" in refused.content.decode()
    assert not refused.wsgi_request.user.is_authenticated
    other = Client(REMOTE_ADDR="203.0.113.8").post(url, {"username": "root", "password": PASSWORD})
    assert other.status_code == 302
