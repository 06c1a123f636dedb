"""Build hook: record the commit the package is built from, for ``summit-jobs --version``.

Everything else is in setup.cfg. An installed package has no git checkout to
ask, so the build writes the short commit (``-dirty`` with changed tracked
files) into ``summit_jobs/REVISION`` of the built package; editable installs
skip it (the checkout answers for itself). No git, no file: --version then
says the revision is unknown.
"""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithRevision(build_py):
    """build_py, then ``summit_jobs/REVISION`` in the build folder."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        sys.path.insert(0, HERE)
        try:
            from summit_jobs.version import REVISION_FILE, git_revision
        finally:
            sys.path.remove(HERE)
        revision = git_revision(os.path.join(HERE, "summit_jobs"))
        if revision:
            target = os.path.join(self.build_lib, "summit_jobs", REVISION_FILE)
            self.mkpath(os.path.dirname(target))
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(revision + "\n")


setup(cmdclass={"build_py": BuildPyWithRevision})
