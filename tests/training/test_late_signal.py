"""A warning signal that arrives while the trainer is finishing must not turn a clean exit into a kill.

Found by the demo: a chain's first job finished its epochs, then LSF's -wa USR2 arrived during interpreter
shutdown (when Python restores default handlers) and the rank died with status 140.
"""
import signal
import time

from trainer_utils import make_dataset, start_ranks, tiny_args


def test_usr2_storm_always_ends_with_exit_0(tmp_path):
    data = make_dataset(tmp_path / "data", train=16, val=0, frames=4, size=32)
    args = tiny_args(tmp_path / "run", data, epochs=1, eval_every=0) + ["--no-test"]
    # Exec'd, not forked by the rank zygote: the storm begins during the rank's imports.
    (proc,) = start_ranks(1, args, tmp_path / "logs", fresh=True)
    time.sleep(1.0)
    while proc.poll() is None:
        proc.send_signal(signal.SIGUSR2)
        time.sleep(0.05)
    assert proc.returncode == 0, (tmp_path / "logs" / "rank0.log").read_text()[-2000:]
