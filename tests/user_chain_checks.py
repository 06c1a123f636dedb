"""What `status` and `report` must say of a user's own chain once it has ended, through the real CLI: the
checks the launcher chains of both schedulers share (test_launcher_chains.py, test_launchers.py,
test_slurm_jobs.py).

- every link shows its own step, later links further than earlier ones (the records of a user's program carry
  no job id: the job script's link events cut them);
- every link says how it ended: the warning and its checkpoint for all but the last, then COMPLETE (or the
  cause the caller names);
- the age of each end is the job script's own time, within a second or two of its exit-code file's;
- `report` counts one launch per link from the run's records, not estimated.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Optional

from lsf_jobs import cli
from trainer import rundir

#: Seconds between the job script's link_end event and its exit-code file (both written at the job's end).
END_SKEW_S = 5.0


def check_user_chain(env: Dict[str, str], run_dir: Path, jobs: List[str], last: Optional[str] = "training complete",
                     total: Optional[int] = None) -> List[Dict]:
    """Check status and report of the ended chain ``jobs`` in ``run_dir``; ``last``: how its last link's end
    begins (None: not checked); ``total``: the last link's step. Returns status's rows."""
    res = cli(["status", "--json", str(run_dir)], env, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [str(r["job_id"]) for r in rows] == jobs, rows
    steps = [r["step"] for r in rows]
    assert all(isinstance(s, int) for s in steps) and steps == sorted(set(steps)), steps
    if total is not None:
        assert steps[-1] == total, steps
    texts = [(r["last_event"] or {}).get("text", "") for r in rows]
    for text in texts[:-1]:
        assert re.fullmatch(r"stopped by the warning: checkpoint at step \d+", text), texts
    if last is not None:
        assert texts[-1].startswith(last), texts
    for row in rows:
        ended = (row["last_event"] or {}).get("time")
        written = (run_dir / rundir.exitcode_name(row["job_id"])).stat().st_mtime
        assert isinstance(ended, (int, float)) and abs(written - ended) < END_SKEW_S, (row, written)
    summary = json.loads(cli(["report", "--json", "--quiet", str(run_dir)], env, timeout=120).stdout)
    summary = summary.get("summary", summary) if isinstance(summary, dict) else summary
    assert summary["launches"] == len(jobs) and summary["launches_estimated"] is False, summary
    assert [j["job_id"] for j in summary["jobs"]] == jobs, summary["jobs"]
    return rows
