"""`status --watch` follows a chain that queues its next link just before its look at bjobs.

A link queues the next one (bsub, then a line in chain.jobs) and only then ends. A look that read
chain.jobs before that line and bjobs after the end saw every job it knew of ended, and --watch stopped
while the next link ran. The site's bjobs here is a real process on PATH that does what the link does at the
worst moment: on its first call it appends the next link's id to chain.jobs and reports the link DONE.
"""
from __future__ import annotations

import json
import os
import sys

from helpers import run_cli

FIELDS = {"QUEUE": "batch", "JOB_NAME": "tsm", "EXIT_CODE": "", "EXIT_REASON": "", "PEND_REASON": "",
          "SUBMIT_TIME": "Nov 10 12:02", "START_TIME": "Nov 10 12:06", "FINISH_TIME": "", "EXEC_HOST": "1*b1:42*a01"}

BJOBS = """
import json, os, sys
count_file, chain = os.environ["WATCH_BJOBS_COUNT"], os.environ["WATCH_CHAIN"]
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(n + 1))
if n == 0:
    with open(chain, "a") as fh:      # the link queues its successor as it ends
        fh.write("8\\n")
states = {"7": "DONE", "8": "RUN" if n < 3 else "DONE"}
fields = json.loads(os.environ["WATCH_FIELDS"])
asked = [a for a in sys.argv[1:] if a.isdigit()]
records = [dict(fields, JOBID=j, STAT=states[j]) for j in asked if j in states]
print(json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": records}))
"""


def test_watch_goes_on_when_a_link_queued_the_next_one_between_two_reads(tmp_path, cli_env):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"name": "tsm-run", "run_dir": str(run_dir), "job_name": "tsm",
                                                  "job_ids": ["7"], "machine": "summit", "until_complete": True}))
    (run_dir / "chain.jobs").write_text("")
    (run_dir / "exitcode.7").write_text("0\n")
    bin_dir = tmp_path / "site-bin"
    bin_dir.mkdir()
    (bin_dir / "bjobs").write_text(f"#!{sys.executable}" + BJOBS)
    (bin_dir / "bjobs").chmod(0o755)
    env = dict(cli_env, PATH=f"{bin_dir}{os.pathsep}{cli_env['PATH']}", XDG_DATA_HOME=str(tmp_path / "data"),
               WATCH_BJOBS_COUNT=str(tmp_path / "count"), WATCH_CHAIN=str(run_dir / "chain.jobs"),
               WATCH_FIELDS=json.dumps(FIELDS))
    proc = run_cli(["--machine", "summit", "--host", "local", "status", "--watch", "--interval", "0.2",
                    str(run_dir)], env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert int((tmp_path / "count").read_text()) >= 4, proc.stdout     # it looked until link 8 ended
    # the first table's rows, then one line per change ("HH:MM:SS job 8 (tsm-run): DONE, link 2/2: ...")
    link8 = [line.split()[3] for line in proc.stdout.splitlines() if line.startswith("tsm-run ") and
             line.split()[1] == "8"]
    link8 += [line.split(": ", 1)[1].split(",")[0] for line in proc.stdout.splitlines()
              if line[8:].startswith(" job 8 (tsm-run): ")]
    assert "running" in link8 and link8[-1] == "done", proc.stdout     # seen running, and to its end
