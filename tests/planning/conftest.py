"""Fixtures of the planning tests."""
import pytest

from summit_jobs.profiles import machines


@pytest.fixture(scope="module")
def summit():
    """The shipped Summit profile, the golden-tested reference machine."""
    return machines.load("summit")
