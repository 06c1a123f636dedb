"""``python -m trainer ...``: what jsrun starts on every rank (see ``trainer.config`` for the options)."""
import sys

from .config import parse
from .train import main

if __name__ == "__main__":
    sys.exit(main(parse()))
