"""A user's --template-dir copy of a template as it shipped before the shared partials still renders the very
script the shipped templates render now.

Why: sites copy lsf/job.sh.j2 or a launch partial into their template folder to change one line; those copies
include summary, environment, link events, launch and epilogue by the paths each scheduler's folder had then
(lsf/partials/summary.j2, ...), which now live once in templates/common/partials/. The renderer finds them
there (render.SharedPartsAtOldPaths, for render.MOVED_PARTS). The copies are tests/data/old-templates/, verbatim.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from summit_jobs.planning import render
from test_render_golden import CASES, _render

OLD = Path(__file__).resolve().parents[1] / "data" / "old-templates"
COPIES = ["lsf/job.sh.j2", "slurm/job.sh.j2", "lsf/partials/launch.j2", "slurm/partials/launch.j2"]


#: The copied file's last words, which show that it was read.
MARK = "# the site's copy\n"


def _pairs():
    """Each golden case with the copies of its own scheduler's templates (Slurm machines' profiles say so)."""
    slurm = {"slurm-gpu", "perlmutter", "frontier", "local-slurm"}
    return [(case, copy) for case in sorted(CASES) for copy in COPIES
            if copy.startswith("slurm/") == (CASES[case][0] in slurm)]


@pytest.mark.parametrize("case,copy", _pairs())
def test_an_old_copy_in_a_template_dir_renders_todays_script(tmp_path, monkeypatch, copy, case):
    from summit_jobs.profiles import machines
    assert machines.load(CASES[case][0]).scheduler.kind == copy.split("/")[0]
    (tmp_path / copy).parent.mkdir(parents=True)
    (tmp_path / copy).write_text((OLD / copy).read_text() + MARK)
    plain = _render(case)
    real = render.render
    monkeypatch.setattr(render, "render", lambda plan, template_dir=None: real(plan, str(tmp_path)))
    got = _render(case)
    if copy.endswith("job.sh.j2") or "launch" not in copy or "launch" in got:
        assert MARK in got, "the copy was not read"
    assert got.replace(MARK, "", 1) == plain


def test_only_shared_parts_are_found_at_their_old_paths():
    assert render.shared_name("lsf/partials/summary.j2") == "common/partials/summary.j2"
    assert render.shared_name("pbs/partials/epilogue.j2") == "common/partials/epilogue.j2"
    for name in ("lsf/partials/chain.j2", "pbs/partials/prologue.j2", "pbs/partials/staging.j2",
                 "pbs/partials/launch_torchrun.j2", "common/partials/summary.j2", "lsf/job.sh.j2", "../partials/summary.j2", "a/b/partials/summary.j2",
                 "lsf/partials/../summary.j2", "lsf/partials/x/summary.j2"):
        assert render.shared_name(name) is None, name


def test_an_old_path_finds_a_users_override_of_the_shared_part_first(tmp_path):
    (tmp_path / "lsf").mkdir()
    (tmp_path / "lsf" / "job.sh.j2").write_text((OLD / "lsf" / "job.sh.j2").read_text())
    (tmp_path / "common" / "partials").mkdir(parents=True)
    (tmp_path / "common" / "partials" / "epilogue.j2").write_text("# the site's own epilogue\n")
    machine, kw = CASES["summit-256-gpu"]
    from summit_jobs.planning.plan import JobOptions, make_plan
    from summit_jobs.profiles import machines
    text = render.render(make_plan(machines.load(machine), JobOptions(run_dir="/r", **kw)), str(tmp_path))
    assert text.endswith("# the site's own epilogue\n")
