"""Fixtures of the embedded LSF's tests."""
from pathlib import Path

import pytest

from trainer_utils import module_dataset

#: What the launcher tests train on: 16 train clips of 4 frames at 32x32.
DATA_SHAPE = dict(train=16, val=0, frames=4, size=32)


@pytest.fixture(scope="module")
def data(request, tmp_path_factory) -> Path:
    """trainer_utils' moving squares, made once for each module (trainer_utils.module_dataset)."""
    return module_dataset(request, tmp_path_factory, DATA_SHAPE)
