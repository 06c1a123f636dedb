"""Fixtures of the data-path tests."""
import pytest


@pytest.fixture(scope="module")
def packs(two_stream_packs):
    """The synthetic videos packed by the real CLI as RGB and as Farneback flow (64-pixel side), shared by the
    session (tests/conftest.py's two_stream_packs); the two-stream tests of this folder train on them."""
    return two_stream_packs
