"""Logging into a login node as OpenSSH would: ~/.ssh/config, jump hosts, keys, one-time codes, host certificates.

Why apart from hosts.py: hosts.py runs commands and moves files over a
connection; this module decides how that connection is made, the way the
user's own ``ssh`` would make it, so that a site's documented set-up works
unchanged from a laptop:

- the ssh config file (``~/.ssh/config``, or the file ``SUMMIT_JOBS_SSH_CONFIG``
  names; ``none`` reads none) through paramiko's own parser: Host aliases,
  HostName, User, Port, IdentityFile (the first that exists), ProxyJump
  (``[user@]host[:port]``, comma-separated hops; each hop is its own SSH
  connection with its own host-key check, and the next runs inside its
  ``direct-tcpip`` channel) and ServerAliveInterval. The command line and the
  profile's ssh block override the file, as ``ssh -p``/``-l``/``-i`` do;
- keys (the named files, then ssh-agent's, then ``~/.ssh/id_*`` when no file is
  named) and, when the server asks for more or for something else,
  keyboard-interactive: OLCF's PIN + token code, LLNL's token. The prompts are
  the server's own, shown on the controlling terminal (``/dev/tty``) and
  answered there with echo off unless the server asks for echo. The answers go
  to the server only: never printed, stored or logged. Without a terminal the
  login stops with one line that says so. One attempt per login: a token that
  is refused is not retried (repeated failures lock tokens at some sites);
- host certificates: a host that presents an OpenSSH certificate is accepted
  when a ``@cert-authority`` line of the user's known_hosts lists the signing
  key for that host name, the certificate names the host, is in its validity
  period and the CA's signature checks out.

Nothing here imports paramiko at module level: the CLI's start-up stays fast.
"""
from __future__ import annotations

import base64
import getpass
import os
import re
import select
import termios
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError

CONFIG_ENV = "SUMMIT_JOBS_SSH_CONFIG"
USER_CONFIG = "~/.ssh/config"
DEFAULT_KEYS = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
#: Jump hosts in one route, at most (a ProxyJump that names itself would otherwise never end).
MAX_HOPS = 8
#: Seconds a login may take once the server asks for a code: people type, the server's LoginGraceTime decides.
TYPING_TIMEOUT = 300.0
#: Host-key algorithms that ask the server for its certificate, offered first when a CA could vouch for it.
CERT_TYPES = ("ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
              "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521-cert-v01@openssh.com",
              "rsa-sha2-512-cert-v01@openssh.com", "rsa-sha2-256-cert-v01@openssh.com")
#: Public-key fields between a certificate's nonce and its serial number (OpenSSH PROTOCOL.certkeys).
_KEY_FIELDS = {"ssh-ed25519-cert-v01@openssh.com": 1, "ssh-rsa-cert-v01@openssh.com": 2,
               "ecdsa-sha2-nistp256-cert-v01@openssh.com": 2, "ecdsa-sha2-nistp384-cert-v01@openssh.com": 2,
               "ecdsa-sha2-nistp521-cert-v01@openssh.com": 2}
HOST_CERT = 2


# -- the ssh config file ---------------------------------------------------------------------------------------
@dataclass
class SshConfig:
    """The ssh config file as paramiko's parser read it (None: no file), and its path for messages."""
    path: Optional[str]
    parsed: object = None

    def lookup(self, name: str) -> Dict[str, object]:
        """The options for host ``name`` (paramiko's SSHConfig.lookup); {} without a file."""
        if self.parsed is None:
            return {}
        try:
            return dict(self.parsed.lookup(name))
        except Exception as exc:  # noqa: BLE001 - Match exec without invoke, odd tokens: one clean line
            raise UserError(f"ssh config file {self.path}: cannot work out the options for host {name!r} "
                            f"({exc}); fix the file, or set {CONFIG_ENV}=none to ignore it.") from None

    def where(self) -> str:
        return f" in {self.path}" if self.path else ""


def read_config() -> SshConfig:
    """The user's ssh config (``SUMMIT_JOBS_SSH_CONFIG`` names another file, ``none`` none), parsed by paramiko."""
    import paramiko
    named = os.environ.get(CONFIG_ENV)
    if named is not None and named.strip().lower() == "none":
        return SshConfig(None)
    path = os.path.expanduser(named or USER_CONFIG)
    if not os.path.isfile(path):
        if named:
            raise UserError(f"ssh config file {path!r} ({CONFIG_ENV}) does not exist or is not a file; fix "
                            f"{CONFIG_ENV}, or set it to none to read no ssh config.")
        return SshConfig(None)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"ssh config file {path} is not UTF-8 text (byte {exc.start}); fix it, or set "
                        f"{CONFIG_ENV}=none to ignore it.") from None
    try:
        return SshConfig(path, paramiko.SSHConfig.from_text(text))
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise UserError(_parse_error(path, text, str(exc))) from None


def _parse_error(path: str, text: str, detail: str) -> str:
    """The refusal of a config file paramiko cannot parse, naming the line when it can be found."""
    fragment = detail.split(" ", 2)[2].strip() if detail.startswith("Unparsable") and detail.count(" ") >= 2 else ""
    where = path
    for number, line in enumerate(text.splitlines(), 1):
        if fragment and fragment in line:
            where = f"{path}:{number}"
            break
    return (f"ssh config file {where} cannot be read: {detail}. Fix that line (`ssh -G HOST` shows how OpenSSH "
            f"reads the file), or set {CONFIG_ENV}=none to ignore the file.")


# -- hops --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hop:
    """One SSH connection of a route: a jump host or the login node itself, with everything resolved."""
    name: str                       # as the user wrote it: a config alias or a host name
    hostname: str                   # where to connect (HostName)
    port: int
    user: str
    key_files: Tuple[str, ...]      # key files to offer, in order
    default_keys: bool              # also ~/.ssh/id_* (no key file named anywhere)
    keepalive: int = 0              # ServerAliveInterval, seconds; 0: none
    jump_for: str = ""              # the host this jump host leads to ("" for the login node)
    config: str = ""                # " in FILE" when an ssh config file was read

    @property
    def known_name(self) -> str:
        """The name known_hosts lists this host under (``[host]:port`` off port 22, as OpenSSH writes it)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    @property
    def address(self) -> str:
        """``user@hostname[:port]``: what a prompt is prefixed with, as OpenSSH does, so a hop's code goes to it."""
        return f"{self.user}@{self.hostname}" + (f":{self.port}" if self.port != 22 else "")

    @property
    def label(self) -> str:
        port = f":{self.port}" if self.port != 22 else ""
        text = f"{self.user}@{self.name}{port}"
        if self.hostname != self.name:
            text += f" ({self.hostname})"
        return f"jump host {text} (ProxyJump of {self.jump_for}{self.config})" if self.jump_for else text


def split_spec(spec: str, what: str) -> Tuple[Optional[str], str, Optional[int]]:
    """``[user@]host[:port]`` (also ``ssh://...`` and ``[v6addr]:port``) as (user, host, port)."""
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):]
    user, at, rest = text.rpartition("@")
    port_text = ""
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else tail
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    else:
        host = rest
    if (at and not user) or not host or host.startswith("-") or any(c.isspace() or ord(c) < 32 for c in host):
        raise UserError(f"{what} {spec!r} is not [USER@]HOST[:PORT]: give a host name (no spaces, not starting "
                        "with '-'), optionally with a user and a port.")
    port = None
    if port_text:
        if not port_text.isdecimal() or not 1 <= int(port_text) <= 65535:
            raise UserError(f"{what} {spec!r}: port {port_text!r} is not a port number (1 to 65535).")
        port = int(port_text)
    return (user or None), host, port


def _number(config: SshConfig, host: str, option: str, value: object, low: int, high: int) -> Optional[int]:
    """A numeric option of the config file (Port, ServerAliveInterval), refused in one line when it is not one."""
    if value is None:
        return None
    text = str(value).strip()
    if not text.isdecimal() or not low <= int(text) <= high:
        raise UserError(f"{option} {text!r} for host {host!r}{config.where()} is not a whole number from {low} "
                        f"to {high}; fix that line of the ssh config.")
    return int(text)


def _key_files(config: SshConfig, host: str, given: Optional[str], opts: Dict[str, object]) -> Tuple[str, ...]:
    """The key file to offer: --key-file / ssh.key_file, else the first IdentityFile of the config that exists."""
    if given:
        path = os.path.expanduser(given)
        if not os.path.isfile(path):
            raise UserError(f"SSH key file {path} does not exist; fix --key-file or the profile's ssh.key_file.")
        return (path,)
    listed = [os.path.expanduser(str(p)) for p in opts.get("identityfile") or []]
    for path in listed:
        if os.path.isfile(path):
            return (path,)
    if listed:
        raise UserError(f"IdentityFile {', '.join(listed)} for host {host!r}{config.where()} does not exist; "
                        "fix the IdentityFile line (or create the key), or pass --key-file.")
    return ()


def _refuse_proxy_command(config: SshConfig, host: str, opts: Dict[str, object]) -> None:
    if opts.get("proxycommand") and str(opts["proxycommand"]).strip().lower() != "none":
        raise UserError(f"ProxyCommand {opts['proxycommand']!r} for host {host!r}{config.where()} is not "
                        "supported (it would run a command through a shell); use ProxyJump JUMPHOST instead.")


def _hop(config: SshConfig, name: str, user: Optional[str], port: Optional[int], key_file: Optional[str],
         jump_for: str = "") -> Tuple[Hop, Dict[str, object]]:
    """A hop from the config's options for ``name``; the given user, port and key file win over the file."""
    opts = config.lookup(name)
    _refuse_proxy_command(config, name, opts)
    hostname = str(opts.get("hostname") or name)
    chosen_port = port or _number(config, name, "Port", opts.get("port"), 1, 65535) or 22
    if jump_for:     # a jump host's own IdentityFile, else the login node's key file (often the same key)
        login_key = os.path.expanduser(key_file) if key_file else ""
        keys = _key_files(config, name, None, opts) or ((login_key,) if os.path.isfile(login_key) else ())
    else:
        keys = _key_files(config, name, key_file, opts)
    keepalive = _number(config, name, "ServerAliveInterval", opts.get("serveraliveinterval"), 0, 86400) or 0
    hop = Hop(name=name, hostname=hostname, port=chosen_port, user=user or str(opts.get("user") or "") or
              getpass.getuser(), key_files=keys, default_keys=not keys, keepalive=keepalive, jump_for=jump_for,
              config=config.where())
    return hop, opts


def _jumps(config: SshConfig, owner: str, spec: object, key_file: Optional[str], seen: Sequence[str]) -> List[Hop]:
    """The jump hosts a ProxyJump value names, first hop first (the first hop's own ProxyJump before it)."""
    if not spec or str(spec).strip().lower() == "none":
        return []
    hops: List[Hop] = []
    for index, part in enumerate(str(spec).split(",")):
        user, name, port = split_spec(part, f"ProxyJump of host {owner!r}{config.where()}:")
        if name in seen or len(seen) >= MAX_HOPS:
            raise UserError(f"ProxyJump {spec!r} of host {owner!r}{config.where()} leads back to {name!r} (or "
                            f"past {MAX_HOPS} hops); fix the ProxyJump lines.")
        hop, opts = _hop(config, name, user, port, key_file, jump_for=owner)
        if index == 0:
            hops += _jumps(config, name, opts.get("proxyjump"), key_file, [*seen, name])
        hops.append(hop)
    return hops


def route(target, config: Optional[SshConfig] = None) -> List[Hop]:
    """The connections to make for ``target`` (an SshTarget), first jump host first, the login node last."""
    config = config if config is not None else read_config()
    hop, opts = _hop(config, target.host, target.user, target.port, target.key_file)
    return [*_jumps(config, target.host, opts.get("proxyjump"), target.key_file, [target.host]), hop]


def error_reason(exc: BaseException) -> str:
    """What went wrong with a connection, in words, for an error of the network or of paramiko.

    Why not ``str(exc)``: paramiko's NoValidConnectionsError is an OSError
    whose errno is None (it stands for one error per address tried), so its
    text reads ``[Errno None] Unable to connect`` and hides the causes, which
    its ``errors`` hold (connection refused, no route to host). A
    ChannelException prints as a tuple; a timeout has no errno either.
    """
    import paramiko
    errors = getattr(exc, "errors", None)
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and isinstance(errors, dict) and errors:
        return "; ".join(f"{addr[0]} port {addr[1]}: {error_reason(err)}" for addr, err in errors.items())
    if isinstance(exc, paramiko.ChannelException):
        return f"{exc.text or 'refused'} (SSH channel error {exc.code})"
    if isinstance(exc, TimeoutError):
        return "no answer in time (timed out)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return re.sub(r"^\[Errno None\]\s*", "", str(exc)) or type(exc).__name__


def forward(jump_client, jump: Hop, hop: Hop):
    """A ``direct-tcpip`` channel from ``jump`` to ``hop``: the socket the next SSH connection runs over."""
    import paramiko
    transport = jump_client.get_transport()
    try:
        return transport.open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0), timeout=20)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise UserError(f"{jump.label} could not open a connection to {hop.hostname}:{hop.port} "
                        f"({error_reason(exc)}); check that it allows TCP forwarding and reaches that "
                        "host, and the HostName and Port of the host behind it.") from None


# -- the terminal ---------------------------------------------------------------------------------------------
def read_answer(fd: int, prompt: str, echo: bool, gone: Optional[Callable[[], bool]] = None) -> str:
    """The prompter: one answer typed at the terminal ``fd``, echoed only when the server asked for echo.

    Echo goes off before the prompt is shown (nothing typed early is echoed),
    and comes back whatever happens. ``gone()`` says the server has hung up
    while the prompt waits (its login grace time ran out): the wait ends then,
    instead of leaving the command hanging on a dead connection.
    """
    old = termios.tcgetattr(fd)
    new = list(old)
    new[3] = (new[3] | termios.ECHO if echo else new[3] & ~termios.ECHO) | termios.ICANON
    termios.tcsetattr(fd, termios.TCSAFLUSH, new)
    try:
        os.write(fd, prompt.encode("utf-8", "replace"))
        data = b""
        while not data.endswith(b"\n"):
            if not select.select([fd], [], [], 0.5)[0]:
                if gone is not None and gone():
                    raise UserError("the server closed the connection while waiting for the answer (its time to "
                                    "log in ran out); run the command again and answer sooner.")
                continue
            chunk = os.read(fd, 1024)
            if not chunk:
                raise UserError("the login was cancelled at the terminal (end of input).")
            data += chunk
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
        if not echo:
            os.write(fd, b"\n")
    return data[:-1].decode("utf-8", "replace").rstrip("\r")


class TerminalPrompter:
    """Answers a server's keyboard-interactive prompts at the controlling terminal (``/dev/tty``).

    Why /dev/tty, not stdin: stdin may be a pipe or a file, and a code must
    never come from there or be echoed into a log. Opened in the main thread:
    a missing terminal is a clean error before anything is sent, and the
    terminal's settings are put back even when Ctrl-C ends the wait.
    paramiko calls the object from its own thread; an error there is kept
    in ``failure`` for the main thread to raise.
    """

    def __init__(self, who: str, address: str = "", transport=None):
        self.who = who
        self.address = address or who
        self.transport = transport
        self.failure: Optional[UserError] = None
        try:
            self.fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        except OSError:
            raise UserError(f"{who} asks for a keyboard-interactive login (a PIN and token code, a one-time "
                            "password), and there is no terminal to ask on: run the command from a terminal "
                            "(an interactive shell), not from a script, a pipe or cron.") from None
        self.saved = termios.tcgetattr(self.fd)

    def __call__(self, title: str, instructions: str, prompts: Sequence[Tuple[str, bool]]) -> List[str]:
        try:
            for text in (title, instructions):
                if text and text.strip():
                    os.write(self.fd, (text.rstrip("\n") + "\n").encode("utf-8", "replace"))
            return [read_answer(self.fd, f"({self.address}) {prompt}", bool(echo), self.server_gone)
                    for prompt, echo in prompts]
        except UserError as exc:
            self.failure = UserError(f"logging in to {self.who}: {exc}")
        except (OSError, termios.error) as exc:
            self.failure = UserError(f"reading the answer for {self.who} at the terminal failed: {exc}.")
        return []

    def server_gone(self) -> bool:
        """Whether the server hung up while a prompt waits (the transport's thread is in this prompt, so
        nobody else reads the connection): end of stream on the socket, or a jump host's channel closed."""
        import socket
        sock = getattr(self.transport, "sock", None)
        if isinstance(sock, socket.socket):
            try:
                return bool(select.select([sock], [], [], 0)[0]) and sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True
        return bool(sock is not None and (getattr(sock, "closed", False) or getattr(sock, "eof_received", False)))

    def close(self) -> None:
        try:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
        except termios.error:
            pass
        os.close(self.fd)


# -- authentication --------------------------------------------------------------------------------------------
def _load_key(path: str, passphrase: Optional[bytes], explicit: bool):
    """The private key in ``path``; None when it needs a passphrase that was not given (or is unreadable
    and was only a default key)."""
    import paramiko
    try:
        return paramiko.PKey.from_path(path, passphrase)
    except TypeError:
        return None                      # encrypted: paramiko says so with a TypeError
    except (ValueError, paramiko.SSHException, OSError) as exc:
        if passphrase is not None:
            raise UserError(f"the passphrase for SSH key {path} was not accepted; run the command again.") from None
        if explicit:
            raise UserError(f"SSH key file {path} cannot be read as a private key ({exc}); give the private key "
                            "file, not the .pub file.") from None
        return None


class Login:
    """How one hop logs in; given to paramiko's ``SSHClient.connect`` as ``auth_strategy``.

    Keys first (named files, ssh-agent, ``~/.ssh/id_*``). When a key is
    accepted but the server wants more (``AuthenticationMethods
    publickey,keyboard-interactive``), or no key is accepted and the server
    offers keyboard-interactive, the server's prompts are answered at the
    terminal. Passwords are not sent by any other method.
    """

    def __init__(self, hop: Hop):
        self.hop = hop
        self.tried: List[str] = []

    def authenticate(self, transport) -> List[object]:
        import paramiko
        allowed = self._with_keys(transport)
        if not transport.is_authenticated() and allowed is None:
            allowed = _methods(transport, self.hop.user)
        if not transport.is_authenticated() and "keyboard-interactive" in (allowed or []):
            self._interactive(transport)
        if not transport.is_authenticated():
            raise paramiko.AuthenticationException(self._refusal(allowed or []))
        return []

    def _with_keys(self, transport) -> Optional[List[str]]:
        """Offer the keys; the methods still wanted after a partial success or a refusal of keys, else None."""
        import paramiko
        agent = _agent()
        try:
            for what, key in self._candidates(agent):
                self.tried.append(what)
                try:
                    remaining = transport.auth_publickey(self.hop.user, key)
                except paramiko.BadAuthenticationType as exc:
                    return list(exc.allowed_types)
                except paramiko.AuthenticationException:
                    continue
                return list(remaining)
        finally:
            if agent is not None:
                agent.close()
        return None

    def _candidates(self, agent) -> Iterator[Tuple[str, object]]:
        paths = list(self.hop.key_files)
        if self.hop.default_keys:
            paths += [p for p in map(os.path.expanduser, DEFAULT_KEYS) if os.path.isfile(p)]
        locked = []
        for path in paths:
            key = _load_key(path, None, explicit=path in self.hop.key_files)
            if key is None:
                locked.append(path)
            else:
                yield path, key
        for key in (agent.get_keys() if agent is not None else ()):
            yield f"ssh-agent key {key.get_name()}", key
        for path in locked:
            key = self._unlock(path)
            if key is not None:
                yield path, key

    def _unlock(self, path: str):
        """A passphrase-protected key, its passphrase asked at the terminal (None without a terminal)."""
        try:
            prompter = TerminalPrompter(self.hop.label)
        except UserError:
            self.tried.append(f"{path} (needs its passphrase: no terminal to ask on; load it into ssh-agent)")
            return None
        try:
            secret = read_answer(prompter.fd, f"Passphrase for key {path}: ", False)
            return _load_key(path, secret.encode(), explicit=True)
        finally:
            prompter.close()

    def _interactive(self, transport) -> None:
        import paramiko
        prompter = TerminalPrompter(self.hop.label, self.hop.address, transport)
        transport.auth_timeout = TYPING_TIMEOUT
        try:
            transport.auth_interactive(self.hop.user, prompter)
        except paramiko.AuthenticationException:
            if prompter.failure is not None:
                raise prompter.failure from None
            raise paramiko.AuthenticationException(
                "the answers to its keyboard-interactive prompts were not accepted (a mistyped PIN, or a token "
                "code that expired or was already used); run the command again with a fresh code") from None
        finally:
            prompter.close()
        if prompter.failure is not None:
            raise prompter.failure

    def _refusal(self, allowed: List[str]) -> str:
        offered = ", ".join(allowed) or "none"
        keys = "; ".join(self.tried) or "no key: none was named, none is in ~/.ssh and no ssh-agent answered"
        if allowed == ["password"]:
            return (f"the server takes passwords only, which this tool never sends (keys tried: {keys}); "
                    "ask the site for key or keyboard-interactive login")
        return f"no key was accepted (tried: {keys}); the server accepts: {offered}"


def _agent():
    """ssh-agent, when SSH_AUTH_SOCK points at one that answers; None otherwise."""
    import paramiko
    if not os.environ.get("SSH_AUTH_SOCK"):
        return None
    try:
        return paramiko.Agent()
    except (paramiko.SSHException, OSError):
        return None


def _methods(transport, user: str) -> List[str]:
    """The login methods the server offers (asked with the 'none' method, as OpenSSH does)."""
    import paramiko
    try:
        transport.auth_none(user)
    except paramiko.BadAuthenticationType as exc:
        return list(exc.allowed_types)
    except paramiko.AuthenticationException:
        return []
    return []


# -- host certificates ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostCertificate:
    """The fields of an OpenSSH certificate a host check needs, and the bytes its CA signed."""
    kind: int
    key_id: str
    principals: Tuple[str, ...]
    valid_after: int
    valid_before: int
    critical: bytes
    ca: bytes
    signed: bytes
    signature: bytes


def _strings(data: bytes) -> Tuple[str, ...]:
    from paramiko.message import Message
    m, out = Message(data), []
    while m.get_remainder():
        out.append(m.get_text())
    return tuple(out)


def host_certificate(key) -> Optional[HostCertificate]:
    """The certificate a server presented as its host key; None for a plain key."""
    from paramiko.message import Message
    blob = getattr(key, "public_blob", None)
    if blob is None or blob.key_type not in _KEY_FIELDS:
        return None
    data = blob.key_blob
    m = Message(data)
    fields = _KEY_FIELDS.get(m.get_text(), 0)
    m.get_binary()                                  # nonce
    for _ in range(fields):
        m.get_binary()                              # the public key itself
    m.get_int64()                                   # serial
    kind, key_id, principals = m.get_int(), m.get_text(), _strings(m.get_binary())
    after, before, critical = m.get_int64(), m.get_int64(), m.get_binary()
    m.get_binary()                                  # extensions
    m.get_binary()                                  # reserved
    ca = m.get_binary()
    signed = data[:m.packet.tell()]
    return HostCertificate(kind, key_id, principals, after, before, critical, ca, signed, m.get_binary())


def host_matches(patterns: str, name: str) -> bool:
    """OpenSSH's known_hosts pattern list (``*``, ``?``, ``!negation``, hashed ``|1|`` names) against ``name``."""
    import hmac
    from paramiko.hostkeys import HostKeys
    hit = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            matched = hmac.compare_digest(HostKeys.hash_host(name, pattern), pattern)
        else:
            regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
            matched = re.fullmatch(regex, name, re.I) is not None
        if matched and negated:
            return False
        hit = hit or matched
    return hit


def bare_host(known_name: str) -> str:
    """``[host]:port`` -> ``host``; a plain name unchanged."""
    if known_name.startswith("[") and "]" in known_name:
        return known_name[1:known_name.index("]")]
    return known_name


def check_certificate(cert: HostCertificate, known_name: str, authorities, now: Optional[float] = None
                      ) -> Optional[str]:
    """Why ``cert`` does not vouch for host ``known_name``; None when a listed CA vouches for it.

    ``authorities``: (host patterns, CA key, where) from the @cert-authority lines.
    """
    from paramiko.message import Message
    host = bare_host(known_name)
    if cert.kind != HOST_CERT:
        return "it presented a user certificate as its host key"
    signer = next((key for patterns, key, _ in authorities
                   if host_matches(patterns, known_name) and key.asbytes() == cert.ca), None)
    if signer is None:
        return "its host certificate is signed by a key that no @cert-authority line of your known_hosts lists " \
               "for this host"
    if host not in cert.principals:
        return f"its host certificate ({cert.key_id!r}) is for {', '.join(cert.principals) or 'no host'}, not {host}"
    if not cert.valid_after <= (now if now is not None else time.time()) < cert.valid_before:
        return f"its host certificate ({cert.key_id!r}) is expired or not yet valid"
    if cert.critical:
        return f"its host certificate ({cert.key_id!r}) has critical options, which host certificates must not"
    try:
        good = signer.verify_ssh_sig(cert.signed, Message(cert.signature))
    except Exception:  # noqa: BLE001 - a malformed signature is a bad signature
        good = False
    return None if good else f"the CA signature on its host certificate ({cert.key_id!r}) does not verify"


def blob_line(blob: bytes) -> str:
    """``type base64`` of a public key blob, as known_hosts lines write it."""
    from paramiko.message import Message
    return f"{Message(blob).get_text()} {base64.b64encode(blob).decode()}"


def transport_factory(prefer_certificates: bool):
    """paramiko's Transport, asking the server for its host certificate first when a CA could vouch for it."""
    import paramiko

    def make(sock, disabled_algorithms=None):
        transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
        if prefer_certificates:
            options = transport.get_security_options()
            options.key_types = [*CERT_TYPES, *(t for t in options.key_types if t not in CERT_TYPES)]
        return transport
    return make
