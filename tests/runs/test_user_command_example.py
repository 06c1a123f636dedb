"""docs/examples/user_train.py, the adapter users copy, run as a real process: a warning signal that comes
while it exits (a link that finished just before its warning time) leaves exit status 0.

Python puts a signal's default action back while the interpreter shuts down, so a USR2 arriving then ended
the script with status 140 and its chain link as EXIT, after the work was saved (seen in a chain run whose
last link finished a moment before the warning).
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "docs" / "examples" / "user_train.py"


def test_a_warning_during_the_exit_of_a_finished_script_keeps_status_0(tmp_path):
    env = dict(os.environ, RANK="0", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(PROGRAM), "--steps", "5"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # its last statement: the work is saved
    assert line.startswith("rank 0: done at step 5"), (line, proc.stderr.read() if proc.poll() else "")
    deadline = time.time() + 30
    while proc.poll() is None and time.time() < deadline:  # the warning, again and again, through the exit
        try:
            os.kill(proc.pid, signal.SIGUSR2)
        except ProcessLookupError:
            break
        time.sleep(0.0005)
    assert proc.wait(30) == 0, proc.stderr.read()[-2000:]
    assert (tmp_path / "COMPLETE").read_text().startswith("step 5 ")
    assert (tmp_path / "checkpoints" / "ckpt-000000005.pt").exists()
