from tests.vendor.fixtures import *  # noqa: F403
