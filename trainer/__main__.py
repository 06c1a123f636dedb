"""``python -m trainer ...``: what jsrun starts on every rank (see ``trainer.config`` for the options)."""
from .signals import catch_early

catch_early()  # before the slow imports: a stop request during start-up is kept, not fatal

import sys  # noqa: E402

from .config import parse  # noqa: E402
from .train import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(parse()))
