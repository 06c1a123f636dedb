"""Bad input to the SSH login: the ssh config file (SUMMIT_JOBS_SSH_CONFIG) and what it says about a host
(ProxyJump, IdentityFile, Port, ServerAliveInterval, ProxyCommand), and --host written as USER@HOST:PORT.
Each case must be refused with a non-zero exit, no traceback and the offending value named; none needs a
server: every one is refused before anything is sent (the unknown jump host when its name does not resolve).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from badinput import assert_refused, run_module

#: (ssh config text or bytes, command line before `status 5`, needles in stderr). @CFG@: the config's path.
CASES: List[Tuple[Optional[object], List[str], List[str]]] = [
    ("Host target\n    HostName 127.0.0.1\n    ProxyJump nosuchjump\n", ["--host", "target"],
     ["'nosuchjump'", "jump host", "neither a Host alias of your ssh config in @CFG@"]),
    ("Host target\n    HostName\n", ["--host", "target"], ["@CFG@:2", "Unparsable line HostName"]),
    ("Host\n", ["--host", "target"], ["@CFG@:1", "Unparsable line Host"]),
    ("Match nonsense\n", ["--host", "target"], ["@CFG@", "'nonsense'"]),
    (b"Host target\n    HostName \xff\xfe\n", ["--host", "target"], ["@CFG@", "is not UTF-8"]),
    ("Host target\n    HostName 127.0.0.1\n    IdentityFile /no/such/key_x\n", ["--host", "target"],
     ["IdentityFile /no/such/key_x for host 'target' in @CFG@ does not exist"]),
    ("Host target\n    HostName 127.0.0.1\n    Port abc\n", ["--host", "target"], ["Port 'abc'", "'target'"]),
    ("Host target\n    HostName 127.0.0.1\n    Port 70000\n", ["--host", "target"], ["Port '70000'"]),
    ("Host target\n    ServerAliveInterval often\n", ["--host", "target"], ["ServerAliveInterval 'often'"]),
    ("Host target\n    ProxyCommand nc %h %p\n", ["--host", "target"], ["ProxyCommand 'nc target 22'"]),
    ("Host target\n    ProxyJump jump:99999\n", ["--host", "target"], ["'jump:99999'", "port '99999'"]),
    ("Host target\n    ProxyJump me@\n", ["--host", "target"], ["'me@'"]),
    ("Host target\n    ProxyJump -oProxyCommand=x\n", ["--host", "target"], ["'-oProxyCommand=x'"]),
    ("Host target\n    ProxyJump target\n", ["--host", "target"], ["ProxyJump 'target'", "leads back"]),
    ("Host a\n    ProxyJump b\nHost b\n    ProxyJump a\n", ["--host", "a"], ["leads back to 'a'"]),
    (None, ["--host", "me@:22"], ["SSH host 'me@:22'"]),
    (None, ["--host", "login:abc"], ["SSH host 'login:abc'", "port 'abc'"]),
    (None, ["--host", "@login"], ["SSH host '@login'"]),
    (None, ["--host", "[::1]:0"], ["'[::1]:0'", "port '0'"]),
    ("MISSING", ["--host", "target"], ["@CFG@", "does not exist", "SUMMIT_JOBS_SSH_CONFIG"]),
]


@pytest.mark.parametrize("config,args,needles", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_bad_login_input_is_refused(cli_env, tmp_path, config, args, needles):  # noqa: F811
    env = dict(cli_env, HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))
    env.pop("SSH_AUTH_SOCK", None)
    path = tmp_path / "ssh_config"
    if isinstance(config, bytes):
        path.write_bytes(config)
    elif config is not None and config != "MISSING":
        path.write_text(config)
    env["SUMMIT_JOBS_SSH_CONFIG"] = str(path) if config is not None else "none"
    proc = run_module("summit_jobs", [*args, "status", "5"], env, timeout=60)
    assert_refused(proc, [n.replace("@CFG@", str(path)) for n in needles], prefix="summit-jobs: error: ")
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_the_default_config_is_read_from_home(cli_env, tmp_path):  # noqa: F811
    """Without SUMMIT_JOBS_SSH_CONFIG the file is ~/.ssh/config; a broken one is named in the refusal."""
    env = dict(cli_env, HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))
    env.pop("SUMMIT_JOBS_SSH_CONFIG", None)
    config = Path(env["HOME"], ".ssh", "config")
    config.parent.mkdir(parents=True)
    config.write_text("Host target\n    IdentityFile ~/.ssh/absent_key\n")
    proc = run_module("summit_jobs", ["--host", "target", "status", "5"], env, timeout=60)
    assert_refused(proc, [f"IdentityFile {env['HOME']}/.ssh/absent_key for host 'target' in {config}"])
