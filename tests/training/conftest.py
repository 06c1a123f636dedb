"""Fixtures of the training tests."""
from pathlib import Path

import pytest

from trainer_utils import make_dataset

#: The moving squares most training tests learn: 24 train and 8 val clips of 8 frames at 32x32.
DATA_SHAPE = dict(train=24, val=8, frames=8, size=32)


@pytest.fixture(scope="module")
def data(request, tmp_path_factory) -> Path:
    """trainer_utils' moving squares, made once for each module: of the module's own DATA_SHAPE where it sets
    one (its steps per epoch depend on it), else of this folder's."""
    shape = getattr(request.module, "DATA_SHAPE", DATA_SHAPE)
    return make_dataset(tmp_path_factory.mktemp("data") / "data", **shape)
