"""Chains of warned links under blaunch (-n/span[ptile] form), the built-in trainer and a plain DDP script;
the trainer chain ends with the jsrun chain's weights.

What every cell checks, and why the chains are warned as they are: tests/launcher_chains.py.
"""
from __future__ import annotations

import pytest

from launcher_chains import PROGRAMS, chains_data, run_and_check  # noqa: F401 - chains_data is a fixture


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_chain_of_warned_links_completes_under_blaunch(tmp_path_factory, chains_data, program):
    run_and_check(tmp_path_factory, chains_data, "blaunch", program)
