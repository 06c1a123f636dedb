"""trainer.agent (torchrun in-process) under the signals a cancel really sends: the first INT starts
torchrun's shutdown, and more signals arrive during it (bkill signals every process of the job and blaunch
passes the signal on as well; LSF follows INT with TERM). The agent must let its shutdown finish (the worker
gets the signal and ends in its own time) and end with one line and 128 + the first signal's number, with no
traceback, also none that logging prints when a signal lands inside a log call."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from lsf_jobs import limit, wait_for
from trainer_utils import REPO

#: The worker: says it is ready, and on SIGINT or SIGTERM takes SLOW seconds to save and end (a checkpoint
#: being written), then writes "ended" and exits 0, as docs/examples/user_train.py does.
WORKER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    out = Path(sys.argv[1])
    asked = []
    signal.signal(signal.SIGINT, lambda s, f: asked.append(s))
    signal.signal(signal.SIGTERM, lambda s, f: asked.append(s))
    (out / "ready").write_text(str(os.getpid()))
    while not asked:
        time.sleep(0.05)
    time.sleep(float(sys.argv[2]))
    (out / "ended").write_text(",".join(str(s) for s in asked))
""")
SLOW = 2.0


def test_more_signals_during_the_shutdown_leave_no_traceback_and_no_worker(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TORCHELASTIC_ERROR_FILE="")
    agent = subprocess.Popen(
        [sys.executable, "-m", "trainer.agent", "--standalone", "--nproc-per-node", "1", str(worker),
         str(tmp_path), str(SLOW)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or agent.poll() is not None, 120, "the worker to start")
        assert agent.poll() is None, agent.communicate()
        worker_pid = int((tmp_path / "ready").read_text())
        os.kill(agent.pid, signal.SIGINT)
        # While torchrun passes the INT on and waits for its worker: the same again, then LSF's TERM.
        for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            time.sleep(0.2)
            os.kill(agent.pid, sig)
        out, err = agent.communicate(timeout=limit(60))
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
    assert agent.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "Traceback" not in err and "Logging error" not in err, err[-3000:]
    assert "trainer.agent: torchrun stopped by SIGINT" in err, err[-3000:]
    # The shutdown ran to its end: the worker had its time to save, and nothing of it is left.
    assert (tmp_path / "ended").exists(), err[-3000:]
    assert not os.path.exists(f"/proc/{worker_pid}"), f"worker {worker_pid} outlived the agent"


def test_only_torchruns_shutdown_lets_a_signal_pass_and_the_warning_is_never_torchruns():
    """The handler lets a signal pass only while torchrun's shutdown is on the stack (a frame of a function
    named _shutdown, close or _close in torch.distributed.elastic); anywhere else it raises, every time."""
    from trainer import agent
    here = {}
    exec(compile("import sys\ndef _shutdown(f):\n    return f()\n", "/site/torch/distributed/elastic/agent.py",
                 "exec"), here)
    assert agent.in_shutdown(here["_shutdown"](sys._getframe))
    assert not agent.in_shutdown(sys._getframe())
    elsewhere = {}
    exec(compile("def _shutdown(f):\n    return f()\n", "/site/mine.py", "exec"), elsewhere)
    assert not agent.in_shutdown(elsewhere["_shutdown"](sys._getframe))
    assert agent.without_ignored("SIGTERM, SIGUSR2,SIGINT") == "SIGTERM,SIGINT"
    assert agent.without_ignored("SIGUSR2") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def test_a_signal_while_the_first_ones_exception_is_handled_is_let_pass():
    """torchrun's agent catches the first signal's SignalException, logs a line, then shuts down: a second
    signal in that log call raised again, and logging printed it as "--- Logging error ---" in a cancelled
    job's log. While a SignalException is being handled the handler lets the signal pass; before and after,
    it raises."""
    from types import SimpleNamespace
    from trainer import agent

    class SignalException(Exception):
        def __init__(self, msg, sigval):
            super().__init__(msg)
            self.sigval = sigval

    api = SimpleNamespace(SignalException=SignalException)
    agent.raise_outside_shutdown(api)
    handler = api._terminate_process_handler
    try:
        handler(signal.SIGINT, sys._getframe())
        raise AssertionError("the first signal did not raise")
    except SignalException as first:
        assert first.sigval == signal.SIGINT
        assert handler(signal.SIGTERM, sys._getframe()) is None        # being handled: let pass
    try:
        handler(signal.SIGTERM, sys._getframe())
        raise AssertionError("a signal after the handled one did not raise")
    except SignalException as later:
        assert later.sigval == signal.SIGTERM
