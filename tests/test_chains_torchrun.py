"""Chains of warned links under torchrun (one agent per virtual node through blaunch -z, -n/span[ptile] form),
the built-in trainer and a plain DDP script; the trainer chain ends with the jsrun chain's weights.

The two torchrun chains run side by side, each in an embedded LSF home of its own, submitted at the same moment:
homes that numbered their jobs alone gave both jobs one id, hence one torchrun rendezvous (the same port and
--rdzv-id), and the four agents met in one store. Their links must have ids and ports of their own.
What every cell checks, and why the chains are warned as they are: tests/launcher_chains.py.
"""
from __future__ import annotations

import re
from typing import Dict

import pytest

from launcher_chains import (PROGRAMS, cell_of, chains_data, check_cell,  # noqa: F401 - chains_data: a fixture
                             jsrun_trainer_chain, run_cells)
from summit_jobs.schedulers.lsf.embedded import state as lsf_state


@pytest.fixture(scope="module")
def cells(tmp_path_factory, chains_data) -> Dict[str, object]:
    """Both programs' chains, side by side; run once for the module's tests."""
    return run_cells(tmp_path_factory, chains_data, "torchrun", PROGRAMS)


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_chain_of_warned_links_completes_under_torchrun(tmp_path_factory, chains_data, cells, program):
    check_cell(cell_of(cells[program]), lambda: jsrun_trainer_chain(tmp_path_factory, chains_data))


#: The torchrun launch line of a job's output: its rendezvous host and port.
TORCHRUN_LINE = r"job {job} starting 4 ranks on 2 nodes \(torchrun, rendezvous ([\w.-]+):(\d+)\)"


def test_torchrun_chains_of_two_homes_run_side_by_side_with_ids_and_ports_of_their_own(cells):
    """The two torchrun cells' homes hand out distinct job ids (one machine-wide counter), their first links
    run at the same time, and links of the two homes that run at the same time rendezvous at ports of their
    own; that every link ended DONE with no process left is the cells' own test."""
    cells = [cell_of(cells[program]) for program in PROGRAMS]
    ids = [job for cell in cells for job in cell.jobs]
    assert len(set(ids)) == len(ids), [cell.jobs for cell in cells]
    links = []                                  # (cell, job, start, finish, port) of every link
    for cell in cells:
        for job in cell.jobs:
            rec = lsf_state.load_job(cell.folder.parent / "lsf", int(job))
            out = (cell.run_dir / f"torchrun-{cell.program}.{job}.out").read_text(errors="replace")
            found = re.search(TORCHRUN_LINE.format(job=job), out)
            assert rec is not None and found, out[-3000:]
            links.append((cell.program, job, rec["start_time"], rec["finish_time"], found.group(2)))
    together = [(a, b) for a in links for b in links
                if a[0] < b[0] and max(a[2], b[2]) < min(a[3], b[3])]
    firsts = {(cells[0].program, cells[0].jobs[0]), (cells[1].program, cells[1].jobs[0])}
    assert any({a[:2], b[:2]} == firsts for a, b in together), links       # the first links side by side
    assert all(a[4] != b[4] for a, b in together), together
