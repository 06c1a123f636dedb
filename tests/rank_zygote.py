"""Rank processes for the tests that start ranks themselves, forked from an interpreter that has already
imported what a rank imports.

Why: a rank's start-up is mostly imports (torch 1.2 CPU-s, torch._dynamo 0.9 CPU-s on the 2-core test
machine), and the tests that start ranks directly (tests/trainer_utils.start_ranks, about 200 of them in the
suite) spent over a third of the suite's CPU time importing the same modules again. This is the pattern the
trainer's own DataLoader workers use (multiprocessing's forkserver with a preload): one clean process, the
"zygote", imports torch, torch._dynamo and the trainer once, then forks a child per rank. It also runs the
trainer's other modules as ``python -m trainer.…`` does (the checkpoint converter) and the tests' own rank
programs (tests/*_worker.py) as ``python SCRIPT`` does: what they import is mostly what the zygote holds.
Each child is a real process with its own pid, process group, environment, working folder and output files;
it runs ``python -m trainer`` from its first line (trainer/__main__.py, with runpy, as ``-m`` does), trains
with real collectives over TCP and exits with the trainer's status; a signal sent to its pid reaches it alone.

What a forked rank does not share with an exec'd one, and where the exec'd kind is still tested:
- it skips the imports, so a fault during start-up (a stop request while torch imports, what the imports
  leave for the collector) is tested with exec'd ranks: ``start_ranks(fresh=True)`` (tests/training/test_startup_gc.py,
  tests/training/test_late_signal.py) and every rank started by a launcher (jsrun, blaunch, mpirun, torchrun, srun);
- its /proc/PID/cmdline and /proc/PID/environ are the zygote's (the environment it runs with is set with
  os.environ, as a program that changes its own environment): tests that find ranks by those start them
  through a launcher;
- every child has the zygote's str hash seed (an exec'd rank draws its own): a rank-order bug that depends on
  set iteration shows in the launcher tests, whose ranks are exec'd;
- environment variables read while torch or the trainer is imported (``IMPORT_TIME`` prefixes: PYTHON*,
  TORCH*, OMP_* ...) are the zygote's: a request whose values for them differ is started with exec instead.

The zygote reaps its children and reports each one's exit status (as Popen's returncode: -N for signal N)
over the connection the request came on. It ends, killing any child still running, when its stdin closes
(the test process ended). ``SUMMIT_JOBS_TEST_EXEC_RANKS=1`` starts every rank with exec (the suite as it ran
before the zygote).

Run as ``python tests/rank_zygote.py SOCKET_PATH`` (by tests/trainer_utils.py), with the rank environment and
working folder the ranks get.
"""
from __future__ import annotations

import atexit
import json
import os
import random
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

#: Environment prefixes that torch, its libraries or Python read while the zygote imports: a request that
#: differs from the zygote in any of them runs with exec.
IMPORT_TIME = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "LD_", "MALLOC",
               "CUDA", "NCCL", "NVIDIA", "TRITON")
#: A request or reply: a 4-byte length, then JSON.
_HEADER = struct.Struct("!I")


def forks_module(module: str) -> bool:
    """Whether ``python -m MODULE`` can be forked here: the trainer or one of its modules, whose imports the
    zygote holds (anything else would import its own in every child)."""
    return module == "trainer" or module.startswith("trainer.")


def forks_script(script: str) -> bool:
    """Whether ``python SCRIPT`` can be forked here: a rank program of the tests (tests/*_worker.py), which
    imports the trainer."""
    path = Path(script).resolve()
    return path.parent == Path(__file__).resolve().parent and path.name.endswith("_worker.py")


def import_time_env(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}


def _send(conn: socket.socket, obj: Dict, fds: Sequence[int] = ()) -> None:
    data = json.dumps(obj).encode()
    frame = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(conn, [frame], list(fds)) if fds else conn.send(frame)
    if sent < len(frame):
        conn.sendall(frame[sent:])


def _recv(conn: socket.socket, max_fds: int = 0) -> Tuple[Optional[Dict], List[int]]:
    """One message and the file descriptors that came with it; (None, []) when the peer closed."""
    if max_fds:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, max_fds)
    else:
        data, fds = conn.recv(1 << 16), []
    if not data:
        return None, fds
    while len(data) < _HEADER.size:
        more = conn.recv(1 << 16)
        if not more:
            return None, fds
        data += more
    (size,) = _HEADER.unpack_from(data)
    while len(data) < _HEADER.size + size:
        more = conn.recv(1 << 16)
        if not more:
            return None, fds
        data += more
    return json.loads(data[_HEADER.size:_HEADER.size + size]), fds


# -- the zygote -----------------------------------------------------------------------------------------

def serve(path: str) -> None:
    """Import what a rank imports, then fork a rank per request until stdin closes."""
    from trainer.loop import startup
    startup.pause()
    import trainer.loop.train  # noqa: F401 - torch, torch.distributed, the model, data and loop
    startup.imports_done()  # torch._dynamo too; what the imports made is frozen, as in a rank
    assert threading.active_count() == 1, "the zygote must not start threads before it forks"

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ, "accept")
    sel.register(0, selectors.EVENT_READ, "stdin")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    own_fds = [server.fileno(), wake_r, wake_w, sel.fileno(), 0]
    children: Dict[int, socket.socket] = {}
    print("ready", flush=True)
    running = True
    while running:
        for key, _ in sel.select(timeout=1.0):
            if key.data == "accept":
                conn, _ = server.accept()
                req, fds = _recv(conn, max_fds=3)
                if req is None:
                    conn.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(req, fds, own_fds + [c.fileno() for c in children.values()] + [conn.fileno()])
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                _send(conn, {"pid": pid})
            elif key.data == "stdin":
                if not os.read(0, 4096):
                    running = False
            else:
                os.read(wake_r, 4096)
        _reap(children)
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in list(children):
        os.waitpid(pid, 0)


def _reap(children: Dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                _send(conn, {"status": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass
            conn.close()


def _child(req: Dict, fds: List[int], close: List[int]) -> None:
    """In the forked child: become the requested process, run ``python -m MODULE ARGS`` (the trainer, or another
    module of the compute side, whose imports the zygote holds), exit as it would."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if req.get("process_group") is not None:
            os.setpgid(0, req["process_group"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(fds[0], 1)
        os.dup2(fds[1] if len(fds) > 1 else fds[0], 2)
        for fd in set(fds + close) - {0, 1, 2}:
            try:
                os.close(fd)
            except OSError:
                pass
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        script = req.get("script")
        # what the interpreter puts first on the path: the working folder for -m, the script's folder
        sys.path[0] = str(Path(script).parent) if script else req["cwd"]
        sys.argv = [script] if script else ["-m"]
        sys.argv += req["args"]
        random.seed()  # an exec'd rank's random module draws its own seed
        import runpy
        try:
            if script:
                runpy.run_path(script, run_name="__main__")
            else:
                module = req.get("module", "trainer")
                # -m runs a module that no one has imported yet: the copy the zygote imported is not __main__
                sys.modules.pop(module, None)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except KeyboardInterrupt:
            traceback.print_exc()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # the status Python exits with on Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: B902 - as the interpreter does with an uncaught exception
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: B902 - never return into the zygote's loop
        try:
            traceback.print_exc()
        except BaseException:  # noqa: B902
            pass
        code = 255
    finally:
        os._exit(code)


def _exit_code(exc: SystemExit) -> int:
    """The status the interpreter exits with for an uncaught SystemExit (its message on stderr)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


# -- the test's side ------------------------------------------------------------------------------------

class ForkedRank:
    """A rank forked by the zygote, with the part of Popen's interface the tests use."""

    def __init__(self, conn: socket.socket, pid: int, args: List[str]):
        self._conn, self.pid, self.args = conn, pid, args
        self.returncode: Optional[int] = None

    def _collect(self, timeout: Optional[float]) -> bool:
        if self.returncode is not None:
            return True
        sel = selectors.DefaultSelector()
        sel.register(self._conn, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        if not ready:
            return False
        msg, _ = _recv(self._conn)
        self._conn.close()
        if msg is None or "status" not in msg:
            raise RuntimeError(f"the rank zygote lost rank {self.pid} (it ended before the rank)")
        self.returncode = msg["status"]
        return True

    def poll(self) -> Optional[int]:
        self._collect(0)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._collect(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # ended and reaped; its status is on the way
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The zygote of this test process, started with ``env`` in ``cwd`` on first use."""

    def __init__(self, env: Dict[str, str], cwd: str, folder: Path):
        self.env, self.cwd = env, cwd
        self.path = str(folder / "zygote.sock")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), self.path], env=env, cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the rank zygote did not start (exit {self.proc.returncode})")
        atexit.register(self.close)

    def accepts(self, env: Dict[str, str]) -> bool:
        """Whether a rank with this environment can be forked here rather than exec'd."""
        return import_time_env(env) == import_time_env(self.env) and self.proc.poll() is None

    def start(self, args: Sequence[str], env: Dict[str, str], cwd: str, stdout: int, stderr: int,
              process_group: Optional[int] = None, module: str = "trainer",
              script: Optional[str] = None) -> ForkedRank:
        """``python -m MODULE ARGS``, or ``python SCRIPT ARGS``, forked. MODULE is the trainer or one of its
        modules (``trainer.…``); SCRIPT a rank program of the tests (tests/*_worker.py) that imports them:
        the imports the zygote holds (forks_module, forks_script)."""
        if script is not None and not forks_script(script):
            raise ValueError(f"the rank zygote runs the tests' own rank programs, not {script}")
        if script is None and not forks_module(module):
            raise ValueError(f"the rank zygote runs the trainer's modules, not {module}")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        _send(conn, {"args": list(args), "env": env, "cwd": cwd, "process_group": process_group, "module": module,
                     "script": script}, [stdout, stderr])
        msg, _ = _recv(conn)
        if msg is None or "pid" not in msg:
            conn.close()
            raise RuntimeError("the rank zygote did not fork the rank")
        command = [script] if script is not None else ["-m", module]
        return ForkedRank(conn, msg["pid"], [sys.executable, *command, *args])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    serve(sys.argv[1])
