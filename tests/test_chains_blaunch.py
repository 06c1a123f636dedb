"""Chains of warned links under blaunch (-n/span[ptile] form), the built-in trainer and a plain DDP script;
the trainer chain ends with the jsrun chain's weights.

What every cell checks, and why the chains are warned as they are: tests/launcher_chains.py.
"""
from __future__ import annotations

import pytest

from launcher_chains import (PROGRAMS, cell_of, check_cell, jsrun_trainer_chain, run_cells,
                             shared_data)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return shared_data(tmp_path_factory)


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_chain_of_warned_links_completes_under_blaunch(tmp_path_factory, data, program):
    cell = cell_of(run_cells(tmp_path_factory, data, "blaunch", [program])[program])
    check_cell(cell, lambda: jsrun_trainer_chain(tmp_path_factory, data))
