"""Kinetics shards: POSIX tar files with an embedded index for random access.

Why this format: HPSS and parallel file systems want few, large files, so
samples are packed into tar shards (webdataset naming: ``<key>.json`` and
``<key>.<frame:05d>.jpg`` members). Training on node-local NVMe wants random
access, which plain webdataset streaming does not give, so every shard ends
with an ``__index__`` member (JSON) listing each sample's frames as byte ranges
inside the tar; the manifest records where that index starts. A reader seeks
straight to a frame (``os.pread``) without scanning the shard, and the file is
still an ordinary tar that ``tar -xf`` or webdataset can read.

Why ``__index__`` and no extension: webdataset skips members named
``__...__`` (its metadata convention), so ``webdataset.WebDataset`` over a pack
yields exactly the samples. Packs written before ended with
``__index__.json``, which webdataset yields as one extra sample per shard keyed
``__index__``; this reader finds the index through the manifest's
``index_offset``, never by name, so those packs read as before (drop the extra
sample in webdataset with ``.select(lambda s: s["__key__"] != "__index__")``).

A pack of optical flow (manifest ``"modality": "flow"``) holds, per sample,
``<key>.<t:05d>.x.jpg`` and ``<key>.<t:05d>.y.jpg``: the grayscale flow_x and
flow_y of field t (motion from frame t to t + 1; ``num_frames`` counts fields).
Its index lists the x members under ``frames`` and the y members under
``flow_y``; ``ShardDataset.flow`` reads the pairs. RGB shards are unchanged.

Tar headers are written by us (ustar, mtime 0, uid 0) so that the same input
always gives the same bytes: deterministic shards, stable hashes.

No torch here: the login node (pack, stage-data) imports this module too.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from trainer.files import discard, named, write_atomic  # noqa: F401 - the one atomic-write helper (trainer.files)

FORMAT = "summit-jobs-shards/1"
#: The index member: a ``__...__`` name, which webdataset skips as metadata (see the module docstring).
INDEX_MEMBER = "__index__"
#: What packs written before named it: webdataset yields it as a sample keyed ``__index__``.
OLD_INDEX_MEMBER = "__index__.json"
MANIFEST_NAME = "manifest.json"
HASH_ALGO = "sha256"
KEY_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,79}$")
#: Shard names reach the HPSS client's command line (where ';' separates requests and '!' runs a
#: local command), htar's member list and file paths: letters, digits, '.', '_', '-' only, never
#: starting with '.' (hidden, '.', '..') or '-' (an option).
SHARD_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")
LOCK_NAME = ".summit-jobs.lock"
BLOCK = 512
_HASH_CHUNK = 4 << 20


class ShardError(Exception):
    """A shard or manifest is missing, malformed or corrupt; the message names it."""


#: Algorithms a manifest may name: hashlib's fixed-size ones, plus BLAKE3 (optional ``blake3``
#: package, about 5x faster than sha256 on one x86 core; see bench/stage_throughput.py).
HASH_ALGOS = tuple(sorted(a for a in hashlib.algorithms_guaranteed if not a.startswith("shake"))) + ("blake3",)


def new_hash(algo: str):
    """A hash object with update()/hexdigest() for ``algo``."""
    if algo == "blake3":
        try:
            import blake3
        except ImportError:
            raise ShardError("the manifest's hash is blake3, and the blake3 package is not installed here: "
                             "pip install blake3 (or pack with --hash sha256)") from None
        return blake3.blake3()
    return hashlib.new(algo)


def digest_hex_len(algo: str) -> int:
    return 64 if algo == "blake3" else hashlib.new(algo).digest_size * 2


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _pad(size: int) -> bytes:
    return b"\0" * ((BLOCK - size % BLOCK) % BLOCK)


@dataclass
class SampleIndex:
    key: str
    label: int
    num_frames: int
    #: (offset, size) of each frame's JPEG bytes inside the tar.
    frames: List[Tuple[int, int]]
    meta: Dict[str, object]
    #: Flow shards only: (offset, size) of each field's flow_y JPEG; ``frames`` then holds the flow_x ones.
    flow_y: Optional[List[Tuple[int, int]]] = None


class ShardWriter:
    """Writes one shard; ``close()`` appends the index and returns the shard's manifest entry.

    Writes to ``<path>.partial`` and renames on close, so a killed writer never
    leaves a file under the final name.
    """

    def __init__(self, path: os.PathLike, split: str, algo: str = HASH_ALGO):
        self.path = Path(path)
        self.split = split
        self.algo = algo
        self._tmp = self.path.with_name(self.path.name + ".partial")
        try:
            self._f = open(self._tmp, "wb")
        except OSError as exc:
            raise named(exc, self.path) from None
        self._hash = new_hash(algo)
        self._offset = 0
        self._samples: List[SampleIndex] = []
        self._keys = set()

    @property
    def bytes_written(self) -> int:
        return self._offset

    def __len__(self) -> int:
        return len(self._samples)

    def _write(self, data: bytes) -> None:
        try:
            self._f.write(data)
        except OSError as exc:
            raise named(exc, self.path) from None
        self._hash.update(data)
        self._offset += len(data)

    def _member(self, name: str, data: bytes) -> Tuple[int, int]:
        self._write(_header(name, len(data)))
        start = self._offset
        self._write(data)
        self._write(_pad(len(data)))
        return start, len(data)

    def _check(self, key: str, frames: Sequence[object]) -> None:
        if not KEY_RE.fullmatch(key):
            raise ShardError(f"sample key {key!r} must be 1-80 characters of letters, digits, '_', '-', '.'")
        if key in self._keys:
            raise ShardError(f"sample key {key!r} appears twice in shard {self.path.name}")
        if not frames:
            raise ShardError(f"sample {key!r} has no frames")
        self._keys.add(key)

    def add(self, key: str, label: int, frames: Sequence[bytes], meta: Optional[Dict[str, object]] = None) -> None:
        self._check(key, frames)
        meta = dict(meta or {})
        info = {"label": int(label), "num_frames": len(frames), **meta}
        self._member(f"{key}.json", json.dumps(info, sort_keys=True).encode())
        spans = [self._member(f"{key}.{i:05d}.jpg", f) for i, f in enumerate(frames)]
        self._samples.append(SampleIndex(key, int(label), len(frames), spans, meta))

    def add_flow(self, key: str, label: int, fields: Sequence[Tuple[bytes, bytes]],
                 meta: Optional[Dict[str, object]] = None) -> None:
        """One sample of optical flow: a (flow_x, flow_y) JPEG pair per field, members
        ``<key>.<t:05d>.x.jpg`` and ``<key>.<t:05d>.y.jpg`` (``num_frames`` counts fields)."""
        self._check(key, fields)
        meta = dict(meta or {})
        info = {"label": int(label), "num_frames": len(fields), **meta}
        self._member(f"{key}.json", json.dumps(info, sort_keys=True).encode())
        xs, ys = [], []
        for t, (x, y) in enumerate(fields):
            xs.append(self._member(f"{key}.{t:05d}.x.jpg", x))
            ys.append(self._member(f"{key}.{t:05d}.y.jpg", y))
        self._samples.append(SampleIndex(key, int(label), len(fields), xs, meta, ys))

    def close(self) -> Dict[str, object]:
        index = {
            "format": FORMAT,
            "samples": [_index_entry(s) for s in self._samples],
        }
        data = json.dumps(index, separators=(",", ":")).encode()
        index_offset, index_bytes = self._member(INDEX_MEMBER, data)
        self._write(b"\0" * (2 * BLOCK))  # end-of-archive marker
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self._tmp, self.path)
        except OSError as exc:
            raise named(exc, self.path) from None
        return {
            "name": self.path.name, "split": self.split, "bytes": self._offset,
            "samples": len(self._samples), self.algo: self._hash.hexdigest(),
            "index_offset": index_offset, "index_bytes": index_bytes,
        }

    def abort(self) -> None:
        """Drop the partial file; closing may fail again on a full disk, which must not keep it."""
        try:
            self._f.close()
        except OSError:
            pass
        discard(self._tmp)


def _index_entry(s: SampleIndex) -> Dict[str, object]:
    """A sample's line of the shard index; ``flow_y`` only for flow samples (RGB indexes keep their bytes)."""
    entry: Dict[str, object] = {"key": s.key, "label": s.label, "num_frames": s.num_frames, "frames": s.frames}
    if s.flow_y is not None:
        entry["flow_y"] = s.flow_y
    return entry


def file_hash(path: os.PathLike, algo: str = HASH_ALGO) -> str:
    h = new_hash(algo)
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(_HASH_CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


#: ``placement`` appears only in a node-local copy (written by trainer.stage): which node, which policy.
#: ``missing``: how many clips the dataset's lists name that were not on disk when it was packed.
#: ``modality`` (absent: rgb) and ``flow``: a pack of optical flow (``pack --modality flow``) and how it was
#: made ({"algorithm", "bound"}); its samples hold flow_x/flow_y pairs, read with ShardDataset.flow.
MANIFEST_KEYS = {"format", "name", "classes", "hash", "shards", "frame_short_side", "placement", "missing",
                 "modality", "flow"}
MODALITIES = ("rgb", "flow")
#: Plus one key named by the manifest's ``hash`` algorithm (``sha256`` by default) holding the hex digest.
SHARD_BASE_KEYS = {"name", "split", "bytes", "samples", "index_offset", "index_bytes"}
SHARD_KEYS = SHARD_BASE_KEYS | {HASH_ALGO}
SPLITS = ("train", "val", "test")


def hash_algo(manifest: Dict[str, object]) -> str:
    """The manifest names its hash algorithm, so a later switch keeps old manifests readable."""
    return str(manifest.get("hash") or HASH_ALGO)


def shard_digest(manifest: Dict[str, object], shard: Dict[str, object]) -> str:
    return str(shard[hash_algo(manifest)])


def check_shard_name(name: object, where: str) -> None:
    """Refuse a shard name that is not a plain file name of safe characters (see SHARD_NAME_RE).

    Why so strict: the name becomes an argument of ``hsi`` (which reads its arguments as
    commands: ``;`` starts another, ``!`` runs a shell command) and a path under the
    destination, so anything else could run a command or write outside the folder.
    """
    if isinstance(name, str) and SHARD_NAME_RE.fullmatch(name):
        return
    raise ShardError(f"{where} name {name!r} is not a plain file name: a shard name is 1-255 letters, digits, "
                     "'.', '_' or '-', not starting with '.' or '-'; fix the manifest or pack the data again")


def validate_manifest(data: object, where: str) -> Dict[str, object]:
    """Check a manifest's shape; errors name the missing or unknown key."""
    if not isinstance(data, dict):
        raise ShardError(f"{where}: a manifest must be a JSON object")
    missing = {"format", "classes", "shards"} - set(data)
    extra = set(data) - MANIFEST_KEYS
    if missing:
        raise ShardError(f"{where}: missing key '{sorted(missing)[0]}' (a manifest holds {', '.join(sorted(MANIFEST_KEYS))})")
    if extra:
        raise ShardError(f"{where}: unknown key '{sorted(extra)[0]}' (a manifest holds {', '.join(sorted(MANIFEST_KEYS))})")
    if data["format"] != FORMAT:
        raise ShardError(f"{where}: format {data['format']!r} is not {FORMAT!r}")
    if not isinstance(data["shards"], list) or not isinstance(data["classes"], list):
        raise ShardError(f"{where}: 'shards' and 'classes' must be lists")
    missing = data.get("missing", 0)
    if not isinstance(missing, int) or isinstance(missing, bool) or missing < 0:
        raise ShardError(f"{where}: 'missing' {missing!r} must be a whole number >= 0")
    if data.get("modality", "rgb") not in MODALITIES:
        raise ShardError(f"{where}: modality {data['modality']!r} is not one of {', '.join(MODALITIES)}")
    algo = hash_algo(data)
    if algo not in HASH_ALGOS:
        raise ShardError(f"{where}: hash algorithm {algo!r} is not one of {', '.join(HASH_ALGOS)}")
    shard_keys = SHARD_BASE_KEYS | {algo}
    names = set()
    for i, s in enumerate(data["shards"]):
        if not isinstance(s, dict):
            raise ShardError(f"{where}: shards[{i}] must be an object")
        missing = shard_keys - set(s)
        extra = set(s) - shard_keys
        if missing:
            raise ShardError(f"{where}: shards[{i}] is missing key '{sorted(missing)[0]}' "
                             f"(a shard entry holds {', '.join(sorted(shard_keys))})")
        if extra:
            raise ShardError(f"{where}: shards[{i}] has unknown key '{sorted(extra)[0]}' "
                             f"(a shard entry holds {', '.join(sorted(shard_keys))})")
        name = s["name"]
        check_shard_name(name, f"{where}: shards[{i}]")
        if name in names:
            raise ShardError(f"{where}: shard {name!r} is listed twice")
        names.add(name)
        for k in ("bytes", "samples", "index_offset", "index_bytes"):
            if not isinstance(s[k], int) or isinstance(s[k], bool) or s[k] < 0:
                raise ShardError(f"{where}: shards[{i}] ({name}) key '{k}' must be a whole number >= 0")
        digest = s[algo]
        if not isinstance(digest, str) or len(digest) != digest_hex_len(algo) \
                or any(c not in "0123456789abcdef" for c in digest):
            raise ShardError(f"{where}: shards[{i}] ({name}) {algo} {digest!r} is not a lowercase hex digest "
                             f"of {digest_hex_len(algo)} characters")
        if s["split"] not in SPLITS:
            raise ShardError(f"{where}: shards[{i}] ({name}) split {s['split']!r} is not one of {', '.join(SPLITS)}")
    return data


def read_manifest(path: os.PathLike) -> Dict[str, object]:
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_NAME
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardError(f"manifest {p} does not exist") from None
    except (OSError, ValueError) as exc:
        raise ShardError(f"manifest {p} cannot be read as JSON: {exc}") from None
    return validate_manifest(data, str(p))


def manifest_modality(manifest: Dict[str, object]) -> str:
    """"rgb" (frames) or "flow" (flow_x/flow_y pairs): what the pack holds; a manifest without the key is rgb."""
    return str(manifest.get("modality", "rgb"))


def write_manifest(path: os.PathLike, manifest: Dict[str, object]) -> None:
    """Atomic: a reader sees the old manifest or the new one, never half of one."""
    p = Path(path)
    validate_manifest(manifest, str(p))
    write_atomic(p, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


def remove_stale_tmp(folder: Path, pattern: str = ".*.tmp*") -> None:
    """Remove temporary files a killed run left in ``folder`` (the caller holds its FolderLock)."""
    for stray in folder.glob(pattern):
        if re.fullmatch(r"\..+\.tmp\d+", stray.name) and stray.is_file():
            stray.unlink(missing_ok=True)


class FolderBusy(ShardError):
    """Another process holds the folder's lock; the message names it."""


class FolderLock:
    """An exclusive lock on a folder that one process writes shards into (pack, staging).

    Why: two runs writing one folder delete each other's temporary files and
    overwrite each other's shards. The lock is a POSIX record lock (fcntl) on
    ``LOCK_NAME`` in the folder, which parallel file systems honour across
    nodes; the kernel drops it when its process dies, even by SIGKILL, so a
    killed run never blocks the next. The file records who holds it, for the
    refusal message, and is removed on release. Where the file system cannot
    lock (``supported`` is then False) callers fall back to checking process ids.
    """

    def __init__(self, folder: Path, what: str):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / LOCK_NAME
        self.fd: Optional[int] = None
        self.supported = True

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.folder)) from None

    def _busy(self, fd: int) -> FolderBusy:
        try:
            holder = os.pread(fd, 300, 0).decode("utf-8", "replace").strip()
        except OSError:
            holder = ""
        return FolderBusy(f"{self.folder} is in use by another run ({holder or 'a process that just started'}; "
                          f"lock file {self.path}): wait for it to finish, or choose another folder")

    def acquire(self) -> "FolderLock":
        for _ in range(20):
            fd = self._open()
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                err = self._busy(fd) if exc.errno in (errno.EACCES, errno.EAGAIN) else None
                os.close(fd)
                if err is not None:
                    raise err from None
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    self.supported = False
                    return self
                raise
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:          # not a file its last holder unlinked after we opened it
                self.fd = fd
                self._record()
                return self
            os.close(fd)
        raise FolderBusy(f"{self.folder}: could not take the lock {self.path}; try again")

    def _record(self) -> None:
        text = f"{self.what}, pid {os.getpid()} on {socket.gethostname()}\n".encode()
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text, 0)
        except OSError:
            pass              # a full disk: the lock holds anyway, only the message loses the holder

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class ShardDataset:
    """Random access to the samples of one split in a folder of shards.

    ``root`` holds ``manifest.json`` and the shards it lists (a node-local NVMe
    copy holds only that node's shards and a manifest listing them). Samples are
    numbered in manifest order, then in shard order: deterministic, so the
    trainer's sample -> rank assignment is the same on every rank.

    File descriptors are opened lazily and per process, so the dataset can be
    handed to DataLoader workers started with spawn or forkserver.
    """

    def __init__(self, root: os.PathLike, split: str = "train"):
        self.root = Path(root)
        self.manifest = read_manifest(self.root)
        self.classes: List[str] = list(self.manifest["classes"])
        self.split = split
        #: "rgb" (frames) or "flow" (flow_x/flow_y pairs, read with ``flow``).
        self.modality: str = manifest_modality(self.manifest)
        self._shards = [s for s in self.manifest["shards"] if s["split"] == split]
        self._samples: List[Tuple[int, SampleIndex]] = []
        for si, shard in enumerate(self._shards):
            for entry in self._read_index(shard)["samples"]:
                ys = entry.get("flow_y")
                if self.modality == "flow" and (ys is None or len(ys) != len(entry["frames"])):
                    raise ShardError(f"shard {self.root / shard['name']}: sample {entry['key']} has no flow_y "
                                     "index in a flow pack; pack it again")
                self._samples.append((si, SampleIndex(entry["key"], entry["label"], entry["num_frames"],
                                                      [tuple(x) for x in entry["frames"]], {},
                                                      None if ys is None else [tuple(y) for y in ys])))
        self._fds: Dict[int, int] = {}
        self._pid = os.getpid()

    def _read_index(self, shard: Dict[str, object]) -> Dict[str, object]:
        path = self.root / shard["name"]
        try:
            with open(path, "rb") as f:
                f.seek(shard["index_offset"])
                data = f.read(shard["index_bytes"])
            index = json.loads(data)
        except FileNotFoundError:
            raise ShardError(f"shard {path} listed in the manifest is missing") from None
        except (OSError, ValueError) as exc:
            raise ShardError(f"shard {path}: its index cannot be read ({exc}); re-stage the shard") from None
        if index.get("format") != FORMAT or len(index.get("samples", ())) != shard["samples"]:
            raise ShardError(f"shard {path}: index does not match the manifest; re-stage the shard")
        return index

    def __len__(self) -> int:
        return len(self._samples)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fds"] = {}
        return state

    def key(self, i: int) -> str:
        return self._samples[i][1].key

    def label(self, i: int) -> int:
        return self._samples[i][1].label

    def num_frames(self, i: int) -> int:
        return self._samples[i][1].num_frames

    def labels(self) -> List[int]:
        return [s.label for _, s in self._samples]

    def _fd(self, si: int) -> int:
        if self._pid != os.getpid():  # forked: never share file offsets/descriptors with the parent
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(si)
        if fd is None:
            fd = os.open(self.root / self._shards[si]["name"], os.O_RDONLY)
            self._fds[si] = fd
        return fd

    def _read(self, si: int, key: str, span: Tuple[int, int]) -> bytes:
        off, size = span
        data = os.pread(self._fd(si), size, off)
        if len(data) != size:
            raise ShardError(f"shard {self._shards[si]['name']}: short read for sample {key}")
        return data

    def _expect(self, modality: str) -> None:
        if self.modality != modality:
            reader = "flow()" if self.modality == "flow" else "frames()"
            raise ShardError(f"{self.root} holds {self.modality} samples (manifest modality {self.modality!r}): "
                             f"read them with ShardDataset.{reader}")

    def frames(self, i: int, indices: Iterable[int]) -> List[bytes]:
        """JPEG bytes of the given frames of sample ``i`` (indices are clamped to the clip)."""
        self._expect("rgb")
        si, sample = self._samples[i]
        last = sample.num_frames - 1
        return [self._read(si, sample.key, sample.frames[min(max(int(j), 0), last)]) for j in indices]

    def flow(self, i: int, indices: Iterable[int]) -> List[Tuple[bytes, bytes]]:
        """(flow_x, flow_y) grayscale JPEG bytes of the given flow fields of sample ``i`` (a flow pack).

        Field t is the motion from frame t to t + 1; indices are clamped to the ``num_frames`` fields.
        A pixel u decodes to ``u * 2 * bound / 255 - bound`` pixels of motion, with the manifest's
        ``flow["bound"]`` (summit_jobs.data.flow.decode).
        """
        self._expect("flow")
        si, sample = self._samples[i]
        last = sample.num_frames - 1
        out = []
        for j in indices:
            t = min(max(int(j), 0), last)
            out.append((self._read(si, sample.key, sample.frames[t]), self._read(si, sample.key, sample.flow_y[t])))
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
