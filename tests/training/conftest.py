"""Fixtures of the training tests."""
from pathlib import Path

import pytest

from trainer_utils import module_dataset

#: The moving squares most training tests learn: 24 train and 8 val clips of 8 frames at 32x32.
DATA_SHAPE = dict(train=24, val=8, frames=8, size=32)


@pytest.fixture(scope="module")
def data(request, tmp_path_factory) -> Path:
    """trainer_utils' moving squares, made once for each module (trainer_utils.module_dataset)."""
    return module_dataset(request, tmp_path_factory, DATA_SHAPE)
