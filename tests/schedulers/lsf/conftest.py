"""Fixtures of the embedded LSF's tests."""
from pathlib import Path

import pytest

from trainer_utils import make_dataset

#: What the launcher tests train on: 16 train clips of 4 frames at 32x32.
DATA_SHAPE = dict(train=16, val=0, frames=4, size=32)


@pytest.fixture(scope="module")
def data(request, tmp_path_factory) -> Path:
    """trainer_utils' moving squares, made once for each module: of the module's own DATA_SHAPE where it sets
    one, else of this folder's."""
    shape = getattr(request.module, "DATA_SHAPE", DATA_SHAPE)
    return make_dataset(tmp_path_factory.mktemp("data") / "data", **shape)
