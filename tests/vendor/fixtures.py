"""Fixtures for the vendor and API tests: a PM, a viewer, two vendors with tokens, a question asked of each,
a capability and verified artifacts. The functions that make them are in tests/factories.py."""

import pytest

from tests.factories import make_account, make_artifact, make_capability, make_question


@pytest.fixture
def pm(db):
    return make_account("pat", "team", "pm")


@pytest.fixture
def viewer(pm):
    return make_account("vera", "team", "viewer")


@pytest.fixture
def vendor_a(db):
    return make_account("alice", "acme", "vendor")


@pytest.fixture
def vendor_b(db):
    return make_account("bruno", "bolt", "vendor")


@pytest.fixture
def question_a(vendor_a):
    """V18, asked of vendor A."""
    return make_question("V18", organisation=vendor_a.user.membership.organisation, state="asked")


@pytest.fixture
def question_b(vendor_b):
    """V19, asked of vendor B."""
    return make_question("V19", organisation=vendor_b.user.membership.organisation, state="asked")


@pytest.fixture
def capability(question_a):
    return make_capability("decode-batch-8", title="Decode batch 8", questions=[question_a], position=1)


@pytest.fixture
def artifacts_a(vendor_a):
    """Vendor A's verified calbin, golden tensors and document."""
    return {
        "calbin": make_artifact(vendor_a.user, kind="calbin", version="0.7.6", file_name="qwen3-b8.calbin"),
        "golden": make_artifact(vendor_a.user, kind="golden", version="0.7.6", file_name="golden-b8.npz"),
        "document": make_artifact(vendor_a.user, kind="document", version="1.0", file_name="notes.pdf"),
    }


@pytest.fixture
def artifacts_b(vendor_b):
    return {
        "calbin": make_artifact(vendor_b.user, kind="calbin", version="2.0", file_name="bolt.calbin"),
        "golden": make_artifact(vendor_b.user, kind="golden", version="2.0", file_name="bolt-golden.npz"),
    }
