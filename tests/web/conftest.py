import os

import pytest

from tests.factories import make_user
from vendor.models import Organisation

# Playwright's sync API runs an event loop in the test's thread; Django's async-safety check would then
# refuse every ORM call the test makes (creating users, moving a run along).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def pm(db):
    return make_user("ada", "team", "pm", organisation_name="Integration team")


@pytest.fixture
def viewer(pm):
    return make_user("victor", "team", "viewer")


@pytest.fixture
def acme_engineer(db):
    return make_user("ann", "acme", "vendor", organisation_name="Acme NPU")


@pytest.fixture
def other_engineer(db):
    return make_user("bob", "bolt", "vendor", organisation_name="Bolt Silicon")


@pytest.fixture
def acme(acme_engineer):
    return Organisation.objects.get(slug="acme")


@pytest.fixture
def pm_client(client, pm):
    client.force_login(pm)
    return client
