"""``python -m trainer ...``: what jsrun starts on every rank (see ``trainer.config`` for the options)."""
from trainer.loop import startup

if __name__ == "__main__":  # not in a DataLoader worker that multiprocessing's spawn starts from this module
    startup.pause()  # until the imports are done (trainer.loop.startup says why)

from trainer.loop.signals import catch_early  # noqa: E402

catch_early()  # before the slow imports: a stop request during start-up is kept, not fatal

import atexit  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from trainer import preflight  # noqa: E402
from trainer.config import parse, unset_variables  # noqa: E402

if __name__ == "__main__":
    args = parse()  # before torch is imported: a refused option costs no start-up time
    problem = unset_variables(args)
    if problem:
        sys.exit(problem)
    preflight.refuse_early(args)  # paths, the data's manifest, packages: refused before torch too
    from trainer.loop.train import main
    rc = main(args)
    # Everything is saved, closed and joined by now. Leave without running C++ static destructors: a
    # background thread of torch.distributed's store or gloo that is still joinable there makes the
    # runtime abort ("terminate called without an active exception", status -6) after a clean finish,
    # which turned a stopped rank into a failed job now and then once its peer had exited first.
    # Python's own exit handlers (checkpoint writer, multiprocessing) still run.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc if isinstance(rc, int) else 1)
