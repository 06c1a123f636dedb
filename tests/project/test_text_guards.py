"""Guards on text: whole-string matches and digits that int() accepts.

``re.match`` with a ``$`` anchor accepts a trailing newline, and ``str.isdigit``
accepts superscripts that ``int`` rejects (a traceback). Every guard here must
refuse both.
"""
from __future__ import annotations

import pytest

from badinput import assert_refused
from lsf_jobs import BIN, lsf_environment, run
from summit_jobs.schedulers.lsf import client as lsf
from summit_jobs.schedulers.lsf.embedded import deps
from trainer import shards


@pytest.mark.parametrize("key", ["abc\n", "a b", "", "a" * 81, "é"])
def test_shard_keys_are_whole_matches(tmp_path, key):
    writer = shards.ShardWriter(tmp_path / "s.tar", "train")
    with pytest.raises(shards.ShardError, match="sample key"):
        writer.add(key, 0, [b"x"])


@pytest.mark.parametrize("text", ["done(1)x", "ended(12)\nx", "\u00b2"])
def test_dependency_terms_are_whole_matches(text):
    with pytest.raises(deps.DependencyError):
        deps.parse_dependency(text)


@pytest.mark.parametrize("argv", [["bsub", "-nnodes", "\u00b2"], ["bsub", "-W", "\u00b2"], ["bkill", "\u00b2"],
                                  ["bjobs", "\u00b2"], ["bsub", "-q", "batch\n"], ["bsub", "-w", "ended(\u00b2)"]])
def test_embedded_commands_refuse_odd_digits_and_trailing_newlines(tmp_path, argv):
    env = lsf_environment(tmp_path)
    proc = run([str(BIN / argv[0]), *argv[1:]], env, input="#!/bin/bash\ntrue\n")
    assert_refused(proc, [argv[-1].strip()])


def test_job_id_guard_in_bsub_lines():
    with pytest.raises(ValueError, match="not a number"):
        lsf.bsub_argv("job.lsf", "file", depends_on="\u00b2")
