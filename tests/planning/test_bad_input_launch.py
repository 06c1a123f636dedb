"""Bad input to the request and launcher options of today's LSF clusters: --request, --launcher, --mem,
--app, --container, --bsub-option and --command, as a user types them. Each case must end non-zero, with no
traceback, a message naming the value, and nothing submitted or executed (a canary file never appears)."""
from __future__ import annotations

import pytest

from badinput import assert_refused
from helpers import run_cli

LOCAL = ["--machine", "local", "submit", "--nodes", "2", "--dry-run"]
SLOTS = [*LOCAL, "--request", "slots", "--launcher", "blaunch"]
SUMMIT = ["--machine", "summit", "submit", "--nodes", "2", "--project", "ABC123", "--dry-run"]

CASES = [
    ("request-unknown", [*LOCAL, "--request", "nodes"], ["'nodes'"]),
    ("launcher-unknown", [*LOCAL, "--launcher", "srun"], ["'srun'"]),
    ("jsrun-in-slots", [*LOCAL, "--request", "slots", "--launcher", "jsrun"], ["--launcher jsrun", "CSM"]),
    ("blaunch-in-csm", [*LOCAL, "--launcher", "blaunch"], ["--launcher blaunch", "--request slots"]),
    ("torchrun-on-summit", [*SUMMIT, "--launcher", "torchrun"], ["--launcher torchrun"]),
    ("mem-on-csm", [*LOCAL, "--mem", "4GB"], ["--mem 4GB", "whole nodes"]),
    ("mem-word", [*SLOTS, "--mem", "lots"], ["--mem 'lots'", "64GB"]),
    ("mem-no-unit", [*SLOTS, "--mem", "64"], ["--mem '64'"]),
    ("mem-zero", [*SLOTS, "--mem", "0GB"], ["--mem '0GB'"]),
    ("mem-negative", [*SLOTS, "--mem", "-4GB"], ["--mem '-4GB'"]),
    ("mem-injection", [*SLOTS, "--mem", "4GB;touch pwned"], ["--mem '4GB;touch pwned'"]),
    ("mem-newline", [*SLOTS, "--mem", "4GB\n#BSUB -q x"], ["--mem"]),
    ("app-space", [*SLOTS, "--app", "parallel 96"], ["--app 'parallel 96'"]),
    ("app-injection", [*SLOTS, "--app", "$(touch pwned)"], ["--app '$(touch pwned)'"]),
    ("container-injection", [*SLOTS, "--container", "img;touch pwned"], ["--container 'img;touch pwned'"]),
    ("container-quote", [*SLOTS, "--container", "img')"], ["--container \"img')\""]),
    ("bsub-option-owned-J", [*SLOTS, "--bsub-option", "-J other"], ["'-J other'", "--job-name"]),
    ("bsub-option-owned-q", [*SLOTS, "--bsub-option", "-q debug"], ["'-q debug'", "--queue"]),
    ("bsub-option-owned-o", [*SLOTS, "--bsub-option", "-o /dev/null"], ["'-o /dev/null'"]),
    ("bsub-option-no-dash", [*SLOTS, "--bsub-option", "B"], ["'B'", "-OPTION value"]),
    ("bsub-option-semicolon", [*SLOTS, "--bsub-option", "-R select[mem>1];touch pwned"], ["touch pwned"]),
    ("bsub-option-dollar", [*SLOTS, "--bsub-option", "-U $(touch pwned)"], ["$(touch pwned)"]),
    ("bsub-option-quote", [*SLOTS, "--bsub-option", "-R \"span[hosts=1]\""], ["span[hosts=1]"]),
    ("bsub-option-newline", [*SLOTS, "--bsub-option", "-B\n#BSUB -q x"], ["-B"]),
    ("bsub-option-legacy-gpu", [*SLOTS, "--bsub-option", "-R rusage[ngpus_excl_p=4]"],
     ["rusage[ngpus_excl_p=4]", "legacy_rusage"]),
    ("command-empty", [*SLOTS, "--command", ""], ["--command ''"]),
    ("command-blank", [*SLOTS, "--command", "   "], ["--command '   '", "names no program"]),
    ("command-unbalanced", [*SLOTS, "--command", "python 'train.py"], ["--command \"python 'train.py\"",
                                                                       "No closing quotation"]),
    ("command-newline", [*SLOTS, "--command", "python train.py\ntouch pwned"], ["line break"]),
]


@pytest.mark.parametrize("case,args,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_launch_option(cli_env, tmp_path, case, args, needles):
    proc = run_cli(args, cli_env, cwd=tmp_path)
    assert_refused(proc, needles)
    assert "#BSUB" not in proc.stdout
    assert not (tmp_path / "pwned").exists()
