"""``python -m trainer ...``: what jsrun starts on every rank (see ``trainer.config`` for the options)."""
from .signals import catch_early

catch_early()  # before the slow imports: a stop request during start-up is kept, not fatal

import sys  # noqa: E402

from .config import parse, unset_variables  # noqa: E402

if __name__ == "__main__":
    args = parse()  # before torch is imported: a refused option costs no start-up time
    problem = unset_variables(args)
    if problem:
        sys.exit(problem)
    from .train import main
    sys.exit(main(args))
