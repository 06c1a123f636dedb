"""Readers of the sample lists that video datasets are distributed with: pure functions returning Samples.

Why a module of its own: every dataset names its clips and splits differently,
and each format has its quirks a reader must know (they are documented next to
the reader). What comes out is the same for all of them: a ``Listing`` of
samples (split, shard key, integer label, path) in the order of the input,
the class names in label order, and the listed clips that are not on disk.

- Kinetics 400/600/700 as distributed: annotation CSVs with a header
  ``label,youtube_id,time_start,time_end,split`` (K400's 2017 files add
  ``is_cc`` and quote labels with spaces; the unlabelled test CSVs have no
  ``label`` column) and flat split folders of
  ``<youtube_id>_<start:06d>_<end:06d>.mp4``. Several percent of the clips are
  gone from YouTube, so a clip not on disk is counted, never fatal. Classes
  are the sorted label names, the convention every Kinetics code base follows.
- mmaction2 / TSM lists under any name: video lists ``path label`` and rawframe
  lists ``folder num_frames label``, told apart by the number of fields;
  PySlowFast's ``path label`` CSVs are the first kind.
- UCF101's ``ucfTrainTestlist`` (classInd.txt, trainlistNN.txt with 1-based
  labels, testlistNN.txt without labels; the files have Windows line ends) and
  HMDB51's ``testTrainMulti_7030_splits/<class>_test_splitN.txt`` (``video.avi
  1|2|0``: train, test, unused). Their test lists become the ``val`` split,
  which the trainer evaluates on (as mmaction2's lists name them).

Every refusal names the file and line, the value, and what would be accepted.
"""
from __future__ import annotations

import csv
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from trainer import shards

SPLIT_ORDER = ("train", "val", "test")
VIDEO_EXTS = (".mp4", ".avi", ".mkv", ".webm", ".mov")
#: The split column's values in the Kinetics CSVs (K700-2020 says "validate", K400/K600 "val").
KINETICS_SPLITS = {"train": "train", "val": "val", "validate": "val", "validation": "val", "test": "test"}
KINETICS_COLUMNS = ("youtube_id", "time_start", "time_end", "split")
#: The most classes a pack names from numeric labels alone (class_000, class_001, ...): Kinetics has 700
#: and the largest video sets a few thousand. A label above this is a typo or another column, and naming
#: every class up to it would take memory without bound.
MAX_CLASSES = 100_000


@dataclass(frozen=True)
class Sample:
    split: str
    key: str
    label: int
    kind: str                            # rawframes | video
    path: str
    num_frames: int = 0                  # rawframes only


@dataclass
class Listing:
    """What a reader found: samples in input order, class names in label order, clips missing from disk."""
    samples: List[Sample]
    classes: List[str]
    missing: List[Dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Inputs:
    """Which reader to use and its files; ``kind`` folder means the SRC folder layouts of pack.py."""
    kind: str = "folder"                 # folder | kinetics | lists | ucf101 | hmdb51
    annotations: Tuple[str, ...] = ()
    lists: Tuple[Tuple[str, str], ...] = ()
    videos: Optional[str] = None
    root: Optional[str] = None
    splits_dir: Optional[str] = None
    split_number: int = 1


#: A sample and where it was listed ("file:line"), for messages that name both copies of a duplicate.
Entry = Tuple[Sample, str]


def sample_key(rel: str) -> str:
    """A shard key from a relative path: readable, unique, within the 80-character rule."""
    stem = re.sub(r"\.[A-Za-z0-9]+$", "", rel) if not rel.endswith("/") else rel
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", stem.replace("/", "__")).lstrip(".")
    if not key or len(key) > 80 or not shards.KEY_RE.fullmatch(key):
        digest = hashlib.sha1(rel.encode()).hexdigest()[:16]
        key = (key[:63].strip("._") or "sample") + "-" + digest
    return key


def read_text(p: Path, what: str) -> str:
    """A UTF-8 text file the user gave us; a file in another encoding is refused naming the file.

    A UTF-8 byte-order mark (what Excel writes) is dropped: it is not part of the first field."""
    if not p.is_file():
        raise UserError(f"{what} {p} does not exist." if not p.exists() else f"{what} {p} is not a file.")
    data = p.read_bytes()
    try:
        return data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserError(f"{what} {p} is not UTF-8 text (byte {data[exc.start:exc.start + 1]!r} on line {line}): "
                        "save it as UTF-8.") from None


def read_class_list(p: Path) -> List[str]:
    """``--classes FILE``: one class name per line, in label order."""
    names = [line.strip() for line in read_text(p, "class list").splitlines() if line.strip()]
    if len(set(names)) != len(names):
        raise UserError(f"class list {p} names a class twice.")
    if not names:
        raise UserError(f"class list {p} names no class: one name per line, in label order.")
    return names


def _lines(p: Path, what: str) -> Iterator[Tuple[int, List[str]]]:
    """(line number, whitespace-separated fields) of the non-blank, non-comment lines."""
    for n, line in enumerate(read_text(p, what).splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield n, line.split()


def _int_field(text: str, where: str, what: str, low: int = 0) -> int:
    """A whole number >= low from a list file, refused with the file, line and value otherwise."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise UserError(f"{where}: {what} {text!r} is not a whole number.")
    value = int(text)
    if value < low:
        raise UserError(f"{where}: {what} {value} must be at least {low}.")
    return value


def check_label(label: int, where: str, classes: Optional[List[str]]) -> None:
    """A numeric label within the class list, or, without one, below MAX_CLASSES.

    Why the second bound: without a class list the classes are named class_000 up
    to the largest label, so one label of 99999999999 would build a list of that
    many names before anything is packed.
    """
    if classes is not None:
        if label >= len(classes):
            raise UserError(f"{where}: label {label} is outside the {len(classes)} classes of the class list "
                            f"(0 to {len(classes) - 1}).")
        return
    if label >= MAX_CLASSES:
        raise UserError(f"{where}: label {label} is above {MAX_CLASSES - 1}, the largest class number pack takes: "
                        "labels count classes from 0 (check the label field of that line).")


def _present(s: Sample) -> bool:
    return os.path.isdir(s.path) if s.kind == "rawframes" else os.path.isfile(s.path)


def finish(entries: Sequence[Entry], classes: List[str]) -> Listing:
    """Refuse a clip listed twice in one split; set apart the listed clips that are not on disk.

    Why missing is not fatal: several percent of Kinetics is gone from YouTube and
    every copy of the dataset lacks different clips; pack counts and lists them.
    """
    seen: Dict[Tuple[str, str], str] = {}
    samples: List[Sample] = []
    missing: List[Dict[str, str]] = []
    for s, where in entries:
        first = seen.setdefault((s.split, s.key), where)
        if first != where:
            raise UserError(f"{where}: {s.path} is listed again in split {s.split} (first at {first}, same sample "
                            f"key {s.key!r}); remove one of the two lines.")
        if _present(s):
            samples.append(s)
        else:
            missing.append({"split": s.split, "key": s.key, "source": s.path, "listed_at": where})
    return Listing(samples, classes, missing)


# ---- Kinetics annotation CSVs ------------------------------------------------------------------

@dataclass(frozen=True)
class KineticsRow:
    where: str
    label: str
    stem: str                            # <youtube_id>_<start:06d>_<end:06d>
    split: str


def _kinetics_columns(path: Path, header: Sequence[str]) -> Dict[str, int]:
    """Column positions by name (the files differ in extra columns such as is_cc, never in these names)."""
    names = [h.strip() for h in header]
    cols = {name: i for i, name in enumerate(names)}
    lacking = [c for c in KINETICS_COLUMNS if c not in cols]
    if lacking:
        raise UserError(f"{path}:1: the header {','.join(names)!r} lacks {', '.join(lacking)}: a Kinetics "
                        "annotation CSV starts with label,youtube_id,time_start,time_end,split.")
    if "label" not in cols:
        raise UserError(f"{path} has no label column (an unlabelled test split): leave it out and pass the "
                        "labelled CSVs only.")
    return cols


def _clip_second(text: str, where: str, column: str) -> int:
    """time_start/time_end: whole seconds (some copies write 1.0); the file name pads them to 6 digits."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value == int(value)):
        raise UserError(f"{where}: {column} {text!r} is not a whole number of seconds >= 0.")
    return int(value)


def _kinetics_row(path: Path, n: int, row: List[str], cols: Dict[str, int]) -> KineticsRow:
    where = f"{path}:{n}"
    if len(row) < len(cols):
        raise UserError(f"{where}: {len(row)} fields where the header has {len(cols)} ({','.join(row)!r}).")
    label, yid = row[cols["label"]].strip(), row[cols["youtube_id"]].strip()
    if not label:
        raise UserError(f"{where}: the label is empty.")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", yid):
        raise UserError(f"{where}: youtube_id {yid!r} is not a YouTube id (letters, digits, '_' and '-').")
    raw_split = row[cols["split"]].strip()
    split = KINETICS_SPLITS.get(raw_split)
    if split is None:
        raise UserError(f"{where}: split {raw_split!r} is not train, val, validate or test.")
    start = _clip_second(row[cols["time_start"]].strip(), where, "time_start")
    end = _clip_second(row[cols["time_end"]].strip(), where, "time_end")
    return KineticsRow(where, label, f"{yid}_{start:06d}_{end:06d}", split)


def kinetics_rows(path: Path) -> List[KineticsRow]:
    """The rows of one annotation CSV (the csv module: quoted labels such as "air drumming" are one field)."""
    text = read_text(path, "annotations")
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader)
    except StopIteration:
        raise UserError(f"annotations {path} is empty: a Kinetics annotation CSV starts with "
                        "label,youtube_id,time_start,time_end,split.") from None
    except csv.Error as exc:
        raise UserError(f"{path}:1: {exc}.") from None
    cols = _kinetics_columns(path, header)
    rows: List[KineticsRow] = []
    try:
        for row in reader:
            if any(field.strip() for field in row):
                rows.append(_kinetics_row(path, reader.line_num, row, cols))
    except csv.Error as exc:
        raise UserError(f"{path}:{reader.line_num}: {exc}.") from None
    if not rows:
        raise UserError(f"annotations {path} lists no clips below its header.")
    return rows


class VideoIndex:
    """Where each clip's file is: ``<videos>/<split>/``, class folders below it, then ``<videos>/`` itself.

    Why an index: 240k ``exists`` calls on a parallel file system are slow; one
    listing per folder is not. The first folder holding a name wins, the split's
    own folder first (a clip is in one split only).
    """

    SPLIT_DIRS = {"train": ("train",), "val": ("val", "validate", "validation"), "test": ("test",)}

    def __init__(self, videos: Path):
        self.videos = videos
        self._by_split: Dict[str, Dict[str, str]] = {}

    @staticmethod
    def _scan(folder: Path, into: Dict[str, str], depth: int) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for e in entries:
            stem, ext = os.path.splitext(e.name)
            if ext.lower() in VIDEO_EXTS and e.is_file():
                into.setdefault(stem, e.path)
            elif depth and e.is_dir():
                VideoIndex._scan(Path(e.path), into, depth - 1)

    def find(self, split: str, stem: str) -> Optional[str]:
        index = self._by_split.get(split)
        if index is None:
            index = {}
            for name in self.SPLIT_DIRS[split]:
                self._scan(self.videos / name, index, 1)
            self._scan(self.videos, index, 0)
            self._by_split[split] = index
        return index.get(stem)


def read_kinetics(csv_files: Sequence[Path], videos: Path, classes: Optional[List[str]]) -> Listing:
    """Samples of the Kinetics annotation CSVs; class index = sorted label names unless a class list is given."""
    rows = [r for p in csv_files for r in kinetics_rows(p)]
    names = classes if classes is not None else sorted({r.label for r in rows})
    index = {c: i for i, c in enumerate(names)}
    found = VideoIndex(videos)
    entries: List[Entry] = []
    for r in rows:
        if r.label not in index:
            raise UserError(f"{r.where}: label {r.label!r} is not in the class list ({len(names)} classes): "
                            "add it there, or leave --classes out to use the labels of the CSVs.")
        path = found.find(r.split, r.stem) or str(videos / r.split / f"{r.stem}.mp4")
        entries.append((Sample(r.split, sample_key(r.stem), index[r.label], "video", path), r.where))
    return finish(entries, names)


# ---- mmaction2 / TSM / PySlowFast lists --------------------------------------------------------

def parse_list_option(text: str) -> Tuple[str, str]:
    """``--list SPLIT=FILE``."""
    split, sep, path = text.partition("=")
    if not sep or not path:
        raise UserError(f"--list {text!r} is not SPLIT=FILE (for example train=kinetics400_train_list_videos.txt).")
    if split not in SPLIT_ORDER:
        raise UserError(f"--list {text!r}: split {split!r} is not one of {', '.join(SPLIT_ORDER)}.")
    return split, path


def _list_kind(fields: int, where: str) -> str:
    kinds = {2: "video", 3: "rawframes"}
    if fields not in kinds:
        raise UserError(f"{where}: {fields} fields; a video list line is 'path label' and a rawframe list line "
                        "'folder num_frames label' (one label: multi-label lists are not supported).")
    return kinds[fields]


def list_entries(split: str, path: Path, root: Path, classes: Optional[List[str]]) -> List[Tuple[Entry, int]]:
    """One list file: ((sample, file:line), label) per line; its kind is set by its first line's fields."""
    out: List[Tuple[Entry, int]] = []
    kind, first = "", 0
    for n, fields in _lines(path, "sample list"):
        where = f"{path}:{n}"
        this = _list_kind(len(fields), where)
        kind, first = (kind, first) if kind else (this, n)
        if this != kind:
            shape = "'path label'" if kind == "video" else "'folder num_frames label'"
            raise UserError(f"{where}: {len(fields)} fields, but line {first} made {path.name} a {kind} list "
                            f"({shape} on every line).")
        label = _int_field(fields[-1], where, "label")
        check_label(label, where, classes)
        frames = _int_field(fields[1], where, "num_frames", 1) if kind == "rawframes" else 0
        full = fields[0] if os.path.isabs(fields[0]) else str(root / fields[0])
        sample = Sample(split, sample_key(fields[0]), label, kind, full, frames)
        out.append(((sample, where), label))
    if not out:
        raise UserError(f"sample list {path} lists no samples.")
    return out


def read_lists(lists: Sequence[Tuple[str, Path]], root: Optional[Path], classes: Optional[List[str]]) -> Listing:
    """mmaction2 video or rawframe lists (and PySlowFast's path-label CSVs), one or more per split.

    Paths are relative to ``root`` (default: each list's own folder, where
    mmaction2's data preparation leaves them next to videos/ or rawframes/).
    Without a class list, the classes are class_000 up to the largest label.
    """
    pairs = [pair for split, p in lists for pair in list_entries(split, p, root or p.parent, classes)]
    top = max(label for _, label in pairs)
    names = classes if classes is not None else [f"class_{i:03d}" for i in range(top + 1)]
    return finish([entry for entry, _ in pairs], names)


# ---- UCF101 and HMDB51 split files -------------------------------------------------------------

class ClassDirs:
    """Class folder names as they are on disk, found without regard to case.

    Why: copies of UCF101's split files and of its video folders spell class 37
    HandStandPushups and HandstandPushups; a case-sensitive join would call
    every clip of that class missing.
    """

    def __init__(self, videos: Path):
        self.videos = videos
        try:
            names = sorted(e.name for e in os.scandir(videos) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            names = []
        self._by_lower = {n.lower(): n for n in names}
        self._numbers: Dict[str, int] = {}

    def class_numbers(self, classes: List[str]) -> Dict[str, int]:
        """Lower-cased class name -> label, built once (the split files differ from classInd in case)."""
        if not self._numbers:
            self._numbers = {c.lower(): i for i, c in enumerate(classes)}
        return self._numbers

    def path(self, folder: str, name: str) -> str:
        return str(self.videos / self._by_lower.get(folder.lower(), folder) / name)


def read_class_ind(path: Path) -> List[str]:
    """UCF101's classInd.txt: ``1 ApplyEyeMakeup`` ... numbered from 1 without gaps."""
    names: List[str] = []
    for n, fields in _lines(path, "class index"):
        where = f"{path}:{n}"
        if len(fields) != 2:
            raise UserError(f"{where}: expected '<number> <ClassName>', got {' '.join(fields)!r}.")
        if _int_field(fields[0], where, "class number", 1) != len(names) + 1:
            raise UserError(f"{where}: class number {fields[0]} breaks the count (expected {len(names) + 1}).")
        names.append(fields[1])
    if not names:
        raise UserError(f"class index {path} names no class.")
    return names


def _split_file(folder: Path, name: str, what: str) -> Path:
    p = folder / name
    if not p.is_file():
        raise UserError(f"{what} {p} does not exist: point the option at the folder holding the official split "
                        "files, and check --split-number (1, 2 or 3).")
    return p


def _ucf_entry(split: str, where: str, fields: List[str], classes: List[str], dirs: ClassDirs) -> Entry:
    lowered = dirs.class_numbers(classes)
    rel = fields[0]
    folder, _, name = rel.partition("/")
    if not name or len(fields) > 2:
        raise UserError(f"{where}: expected '<Class>/<video>.avi' (and a label in trainlists), got "
                        f"{' '.join(fields)!r}.")
    label = lowered.get(folder.lower())
    if label is None:
        raise UserError(f"{where}: class folder {folder!r} is not in classInd.txt ({len(classes)} classes).")
    if len(fields) == 2 and _int_field(fields[1], where, "label", 1) != label + 1:
        raise UserError(f"{where}: label {fields[1]} is class {_class_name(classes, fields[1])} in classInd.txt, "
                        f"but the video is in folder {folder!r} (class {label + 1}).")
    return Sample(split, sample_key(rel), label, "video", dirs.path(folder, name)), where


def _class_name(classes: List[str], number: str) -> str:
    i = int(number) - 1
    return repr(classes[i]) if 0 <= i < len(classes) else "none"


def read_ucf101(splits_dir: Path, number: int, videos: Path) -> Listing:
    """UCF101's official split N: trainlistNN.txt -> train, testlistNN.txt -> val; classes from classInd.txt."""
    check_split_number(number)
    classes = read_class_ind(_split_file(splits_dir, "classInd.txt", "UCF101 class index"))
    dirs = ClassDirs(videos)
    entries: List[Entry] = []
    for split, name in (("train", f"trainlist{number:02d}.txt"), ("val", f"testlist{number:02d}.txt")):
        path = _split_file(splits_dir, name, "UCF101 split file")
        for n, fields in _lines(path, "UCF101 split file"):
            entries.append(_ucf_entry(split, f"{path}:{n}", fields, classes, dirs))
    return finish(entries, classes)


def check_split_number(number: int) -> None:
    if number not in (1, 2, 3):
        raise UserError(f"--split-number {number} must be 1, 2 or 3 (the three official splits).")


HMDB_USE = {"1": "train", "2": "val", "0": None}


def hmdb51_files(splits_dir: Path, number: int) -> List[Tuple[str, Path]]:
    """(class, file) of ``<class>_test_split<N>.txt``, classes sorted by name (mmaction2's class order)."""
    check_split_number(number)
    if not splits_dir.is_dir():
        raise UserError(f"HMDB51 split folder {splits_dir} does not exist (it holds <class>_test_split1.txt ... "
                        "from test_train_splits.rar).")
    suffix = f"_test_split{number}.txt"
    found = sorted((p.name[:-len(suffix)], p) for p in splits_dir.iterdir() if p.name.endswith(suffix))
    if not found:
        raise UserError(f"{splits_dir} holds no <class>{suffix} files: point --hmdb51-splits at the folder of "
                        "HMDB51's split files (testTrainMulti_7030_splits).")
    return found


def read_hmdb51(splits_dir: Path, number: int, videos: Path) -> Listing:
    """HMDB51's official split N: 1 = train, 2 = test (packed as val), 0 = not used in this split."""
    files = hmdb51_files(splits_dir, number)
    classes = [c for c, _ in files]
    dirs = ClassDirs(videos)
    entries: List[Entry] = []
    for label, (cls, path) in enumerate(files):
        for n, fields in _lines(path, "HMDB51 split file"):
            where = f"{path}:{n}"
            if len(fields) != 2 or fields[1] not in HMDB_USE:
                raise UserError(f"{where}: expected '<video>.avi 1|2|0' (1 train, 2 test, 0 unused), got "
                                f"{' '.join(fields)!r}.")
            split = HMDB_USE[fields[1]]
            if split:
                sample = Sample(split, sample_key(f"{cls}/{fields[0]}"), label, "video", dirs.path(cls, fields[0]))
                entries.append((sample, where))
    return finish(entries, classes)


# ---- which reader ------------------------------------------------------------------------------

def describe(inputs: Inputs) -> str:
    """The option that chose the reader, for messages."""
    return {"kinetics": "--annotations", "lists": "--list", "ucf101": "--ucf101-splits",
            "hmdb51": "--hmdb51-splits"}.get(inputs.kind, "SRC")


def check_inputs(inputs: Inputs, classes_file: Optional[str]) -> None:
    """Refuse option combinations that cannot mean anything, before a file is read."""
    opt = describe(inputs)
    if inputs.kind in ("kinetics", "ucf101", "hmdb51") and not inputs.videos:
        raise UserError(f"{opt} needs --videos DIR: the folder holding the video files.")
    if inputs.kind != "lists" and inputs.root:
        raise UserError(f"--root is the folder the paths of --list files are relative to; {opt} uses --videos.")
    if inputs.kind in ("lists", "folder") and inputs.videos:
        raise UserError("--videos goes with --annotations, --ucf101-splits or --hmdb51-splits; "
                        + ("--list paths are relative to --root." if inputs.kind == "lists"
                           else "a SRC folder holds its videos itself."))
    if inputs.kind in ("ucf101", "hmdb51") and classes_file:
        raise UserError(f"--classes does not apply to {opt}: "
                        + ("classInd.txt" if inputs.kind == "ucf101" else "the split file names")
                        + " name the classes.")
    for folder, what in ((inputs.videos, "--videos"), (inputs.root, "--root"), (inputs.splits_dir, opt)):
        if folder and not Path(folder).is_dir():
            raise UserError(f"{what} {folder} " + ("is a file, not a folder." if Path(folder).exists()
                                                  else "does not exist."))


def read_inputs(inputs: Inputs, classes: Optional[List[str]]) -> Listing:
    """The listing of a list-driven input (every kind but folder)."""
    videos = Path(inputs.videos or ".")
    if inputs.kind == "kinetics":
        return read_kinetics([Path(a) for a in inputs.annotations], videos, classes)
    if inputs.kind == "lists":
        pairs = [(split, Path(p)) for split, p in inputs.lists]
        return read_lists(pairs, Path(inputs.root) if inputs.root else None, classes)
    if inputs.kind == "ucf101":
        return read_ucf101(Path(inputs.splits_dir or "."), inputs.split_number, videos)
    if inputs.kind == "hmdb51":
        return read_hmdb51(Path(inputs.splits_dir or "."), inputs.split_number, videos)
    raise UserError(f"input kind {inputs.kind!r} is not known.")
