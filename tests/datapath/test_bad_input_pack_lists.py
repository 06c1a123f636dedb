"""Bad input to pack's list-driven inputs (Kinetics CSVs, mmaction2 / PySlowFast lists, UCF101 and HMDB51
split files, the order and template options): a table of refusals.

Every case is a command a user could type, or a list file a user could hand
over, run through the real entry point in a real process. Each must end with a
non-zero exit, no traceback, and one message naming the file and line (for a
bad line) and the value that was refused.
"""
import shutil

import pytest

from badinput import assert_refused
from helpers import REPO, run_cli

DATA = REPO / "tests" / "data"
CLI = "summit-jobs: error:"
HEADER = "label,youtube_id,time_start,time_end,split\n"

#: name -> content of a file written into the fixture folder (bytes where it is deliberately not UTF-8).
FILES = {
    "kin-header.csv": "name,id,from,to\nabseiling,0wR5jVB-WPk,417,427\n",
    "kin-split.csv": HEADER + "abseiling,0wR5jVB-WPk,417,427,holdout\n",
    "kin-time.csv": HEADER + "abseiling,0wR5jVB-WPk,ten,427,train\n",
    "kin-id.csv": HEADER + "abseiling,0wR5j;rm -rf,417,427,train\n",
    "kin-short.csv": HEADER + "abseiling,0wR5jVB-WPk\n",
    "kin-nolabel.csv": HEADER + ",0wR5jVB-WPk,417,427,train\n",
    "kin-latin1.csv": (HEADER + "caf\u00e9,0wR5jVB-WPk,417,427,train\n").encode("latin-1"),
    "kin-empty.csv": "",
    "kin-header-only.csv": HEADER,
    "classes-3.txt": "abseiling\nair drumming\npassing American football (in game)\n",
    "list-one-field.txt": "train/clip.mp4\n",
    "list-four-fields.txt": "train/clip 8 3 5\n",
    "list-mixed.txt": "train/a.mp4 0\ntrain/b 8 0\n",
    "list-label-word.txt": "train/a.mp4 abseiling\n",
    "list-label-negative.txt": "train/a.mp4 -1\n",
    "list-label-range.txt": "train/a.mp4 0\ntrain/b.mp4 7\n",
    "list-frames-zero.txt": "train/a 0 1\n",
    "list-frames-word.txt": "train/a many 1\n",
    "list-latin1.txt": "d\u00e9j\u00e0.mp4 0\n".encode("latin-1"),
    "list-empty.txt": "\n# only a comment\n",
    "list-duplicate.txt": "train/a.mp4 0\ntrain/a.mp4 1\n",
    "ucf-gap/classInd.txt": "1 ApplyEyeMakeup\r\n3 Archery\r\n",
    "ucf-mismatch/classInd.txt": "1 ApplyEyeMakeup\r\n2 ApplyLipstick\r\n3 Archery\r\n",
    "ucf-mismatch/trainlist01.txt": "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 3\r\n",
    "ucf-mismatch/testlist01.txt": "ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi\r\n",
    "ucf-unknown/classInd.txt": "1 ApplyEyeMakeup\r\n",
    "ucf-unknown/trainlist01.txt": "ApplyLipstick/v_ApplyLipstick_g08_c01.avi 1\r\n",
    "ucf-unknown/testlist01.txt": "",
    "ucf-noslash/classInd.txt": "1 ApplyEyeMakeup\r\n",
    "ucf-noslash/trainlist01.txt": "v_ApplyEyeMakeup_g08_c01.avi 1\r\n",
    "ucf-noslash/testlist01.txt": "",
    "hmdb-id/brush_hair_test_split1.txt": "April_09_brush_hair_u_nm_np1_ba_goo_0.avi 3 \n",
    "hmdb-fields/brush_hair_test_split1.txt": "April_09_brush_hair_u_nm_np1_ba_goo_0.avi\n",
    "hmdb-empty/README": "no split files here\n",
    "hmdb-unused/wave_test_split1.txt": "winKen_wave_u_cm_np1_ri_bad_1.avi 0 \n",
    "videos/README": "an empty videos folder\n",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("badlists")
    for name, content in FILES.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    for name in ("k400_val_rows.csv", "k400_test_rows.csv", "k700_2020_validate_rows.csv"):
        shutil.copy(DATA / "kinetics" / name, root / name)
    shutil.copytree(DATA / "ucf101" / "ucfTrainTestlist", root / "ucf")
    shutil.copytree(DATA / "hmdb51" / "testTrainMulti_7030_splits", root / "hmdb")
    (root / "xdg").mkdir()
    return root


V = ["--videos", "{r}/videos"]
K400 = ["--annotations", "{r}/k400_val_rows.csv"]

# (case id, arguments after `pack` with {r} for the fixture folder, needles)
CASES = [
    # ---- which input, and the paths
    ("no-paths", [], ["got 0 paths"]),
    ("three-paths", ["{r}/a", "{r}/b", "{r}/c"], ["got 3 paths"]),
    ("annotations-with-src", ["{r}/videos", "{r}/o", *K400, *V], ["--annotations", "give only OUT", "{r}/videos"]),
    ("two-inputs", ["{r}/o", *K400, *V, "--list", "train={r}/list-mixed.txt"], ["--annotations and --list"]),
    ("src-with-videos", ["{r}/videos", "{r}/o", "--videos", "{r}/videos"], ["--videos"]),
    ("annotations-with-root", ["{r}/o", *K400, *V, "--root", "{r}/videos"], ["--root"]),
    # ---- Kinetics annotation CSVs
    ("kin-no-videos", ["{r}/o", *K400], ["--annotations needs --videos"]),
    ("kin-videos-missing", ["{r}/o", *K400, "--videos", "{r}/nowhere"], ["{r}/nowhere", "does not exist"]),
    ("kin-videos-is-file", ["{r}/o", *K400, "--videos", "{r}/classes-3.txt"], ["{r}/classes-3.txt", "is a file"]),
    ("kin-csv-missing", ["{r}/o", "--annotations", "{r}/gone.csv", *V], ["{r}/gone.csv", "does not exist"]),
    ("kin-unlabelled-test", ["{r}/o", "--annotations", "{r}/k400_test_rows.csv", *V],
     ["{r}/k400_test_rows.csv", "no label column"]),
    ("kin-header", ["{r}/o", "--annotations", "{r}/kin-header.csv", *V],
     ["{r}/kin-header.csv:1", "'name,id,from,to'", "youtube_id"]),
    ("kin-split", ["{r}/o", "--annotations", "{r}/kin-split.csv", *V], ["{r}/kin-split.csv:2", "'holdout'"]),
    ("kin-time", ["{r}/o", "--annotations", "{r}/kin-time.csv", *V], ["{r}/kin-time.csv:2", "time_start 'ten'"]),
    ("kin-youtube-id", ["{r}/o", "--annotations", "{r}/kin-id.csv", *V], ["{r}/kin-id.csv:2", "'0wR5j;rm -rf'"]),
    ("kin-short-row", ["{r}/o", "--annotations", "{r}/kin-short.csv", *V], ["{r}/kin-short.csv:2", "2 fields"]),
    ("kin-empty-label", ["{r}/o", "--annotations", "{r}/kin-nolabel.csv", *V],
     ["{r}/kin-nolabel.csv:2", "label is empty"]),
    ("kin-latin1", ["{r}/o", "--annotations", "{r}/kin-latin1.csv", *V],
     ["{r}/kin-latin1.csv", "not UTF-8", "line 2"]),
    ("kin-empty-file", ["{r}/o", "--annotations", "{r}/kin-empty.csv", *V], ["{r}/kin-empty.csv", "is empty"]),
    ("kin-header-only", ["{r}/o", "--annotations", "{r}/kin-header-only.csv", *V],
     ["{r}/kin-header-only.csv", "lists no clips"]),
    ("kin-label-not-in-classes", ["{r}/o", *K400, *V, "--classes", "{r}/classes-3.txt"],
     ["{r}/k400_val_rows.csv:12", "label 'archery'"]),
    ("kin-duplicate-clip", ["{r}/o", *K400, "--annotations", "{r}/k700_2020_validate_rows.csv", *V],
     ["{r}/k700_2020_validate_rows.csv:4", "{r}/k400_val_rows.csv:7", "--nQbRBEz2s_000104_000114"]),
    ("kin-nothing-on-disk", ["{r}/o", *K400, *V], ["20 listed clips are not on disk", "0wR5jVB-WPk_000417_000427"]),
    # ---- mmaction2 / PySlowFast lists
    ("list-no-equals", ["{r}/o", "--list", "train"], ["--list 'train'", "SPLIT=FILE"]),
    ("list-bad-split", ["{r}/o", "--list", "training={r}/list-mixed.txt"], ["split 'training'"]),
    ("list-missing-file", ["{r}/o", "--list", "train={r}/gone.txt"], ["{r}/gone.txt", "does not exist"]),
    ("list-one-field", ["{r}/o", "--list", "train={r}/list-one-field.txt"], ["{r}/list-one-field.txt:1", "1 fields"]),
    ("list-four-fields", ["{r}/o", "--list", "train={r}/list-four-fields.txt"],
     ["{r}/list-four-fields.txt:1", "4 fields", "multi-label"]),
    ("list-mixed-kinds", ["{r}/o", "--list", "train={r}/list-mixed.txt"],
     ["{r}/list-mixed.txt:2", "line 1 made list-mixed.txt a video list"]),
    ("list-label-word", ["{r}/o", "--list", "train={r}/list-label-word.txt"],
     ["{r}/list-label-word.txt:1", "label 'abseiling'"]),
    ("list-label-negative", ["{r}/o", "--list", "train={r}/list-label-negative.txt"],
     ["{r}/list-label-negative.txt:1", "label -1"]),
    ("list-label-range", ["{r}/o", "--list", "train={r}/list-label-range.txt", "--classes", "{r}/classes-3.txt"],
     ["{r}/list-label-range.txt:2", "label 7", "3 classes"]),
    ("list-frames-zero", ["{r}/o", "--list", "train={r}/list-frames-zero.txt"],
     ["{r}/list-frames-zero.txt:1", "num_frames 0"]),
    ("list-frames-word", ["{r}/o", "--list", "train={r}/list-frames-word.txt"],
     ["{r}/list-frames-word.txt:1", "num_frames 'many'"]),
    ("list-latin1", ["{r}/o", "--list", "train={r}/list-latin1.txt"], ["{r}/list-latin1.txt", "not UTF-8"]),
    ("list-empty", ["{r}/o", "--list", "train={r}/list-empty.txt"], ["{r}/list-empty.txt", "lists no samples"]),
    ("list-duplicate", ["{r}/o", "--list", "train={r}/list-duplicate.txt", "--root", "{r}/videos"],
     ["{r}/list-duplicate.txt:2", "listed again", "{r}/list-duplicate.txt:1"]),
    ("list-nothing-on-disk", ["{r}/o", "--list", "train={r}/list-label-range.txt", "--root", "{r}/videos"],
     ["2 listed clips are not on disk", "{r}/videos/train/a.mp4"]),
    ("list-root-missing", ["{r}/o", "--list", "train={r}/list-mixed.txt", "--root", "{r}/nowhere"],
     ["--root {r}/nowhere", "does not exist"]),
    ("list-with-videos", ["{r}/o", "--list", "train={r}/list-mixed.txt", *V], ["--videos", "--root"]),
    # ---- template and order options
    ("tmpl-no-field", ["{r}/o", "--list", "train={r}/list-frames-zero.txt", "--filename-tmpl", "img.jpg"],
     ["--filename-tmpl 'img.jpg'"]),
    ("tmpl-two-fields", ["{r}/o", "--list", "train={r}/list-frames-zero.txt", "--filename-tmpl", "{}_{}.jpg"],
     ["--filename-tmpl '{}_{}.jpg'"]),
    ("tmpl-outside", ["{r}/o", "--list", "train={r}/list-frames-zero.txt", "--filename-tmpl", "../{:05d}.jpg"],
     ["--filename-tmpl '../{:05d}.jpg'", "outside"]),
    ("seed-negative", ["{r}/videos", "{r}/o", "--seed", "-1"], ["--seed -1"]),
    ("seed-huge", ["{r}/videos", "{r}/o", "--seed", "99999999999"], ["--seed 99999999999"]),
    # ---- UCF101
    ("ucf-no-videos", ["{r}/o", "--ucf101-splits", "{r}/ucf"], ["--ucf101-splits needs --videos"]),
    ("ucf-split-number", ["{r}/o", "--ucf101-splits", "{r}/ucf", *V, "--split-number", "4"], ["--split-number 4"]),
    ("ucf-split-file-missing", ["{r}/o", "--ucf101-splits", "{r}/ucf", *V, "--split-number", "2"],
     ["{r}/ucf/trainlist02.txt", "does not exist"]),
    ("ucf-no-class-index", ["{r}/o", "--ucf101-splits", "{r}/videos", *V], ["{r}/videos/classInd.txt"]),
    ("ucf-class-number-gap", ["{r}/o", "--ucf101-splits", "{r}/ucf-gap", *V],
     ["{r}/ucf-gap/classInd.txt:2", "class number 3"]),
    ("ucf-label-mismatch", ["{r}/o", "--ucf101-splits", "{r}/ucf-mismatch", *V],
     ["{r}/ucf-mismatch/trainlist01.txt:1", "label 3", "'Archery'", "'ApplyEyeMakeup'"]),
    ("ucf-unknown-class", ["{r}/o", "--ucf101-splits", "{r}/ucf-unknown", *V],
     ["{r}/ucf-unknown/trainlist01.txt:1", "'ApplyLipstick'"]),
    ("ucf-no-class-folder", ["{r}/o", "--ucf101-splits", "{r}/ucf-noslash", *V],
     ["{r}/ucf-noslash/trainlist01.txt:1", "'v_ApplyEyeMakeup_g08_c01.avi 1'"]),
    ("ucf-with-classes", ["{r}/o", "--ucf101-splits", "{r}/ucf", *V, "--classes", "{r}/classes-3.txt"],
     ["--classes", "classInd.txt"]),
    ("ucf-dir-missing", ["{r}/o", "--ucf101-splits", "{r}/nowhere", *V], ["{r}/nowhere", "does not exist"]),
    # ---- HMDB51
    ("hmdb-no-videos", ["{r}/o", "--hmdb51-splits", "{r}/hmdb"], ["--hmdb51-splits needs --videos"]),
    ("hmdb-bad-id", ["{r}/o", "--hmdb51-splits", "{r}/hmdb-id", *V],
     ["{r}/hmdb-id/brush_hair_test_split1.txt:1", "'April_09_brush_hair_u_nm_np1_ba_goo_0.avi 3'"]),
    ("hmdb-no-id", ["{r}/o", "--hmdb51-splits", "{r}/hmdb-fields", *V],
     ["{r}/hmdb-fields/brush_hair_test_split1.txt:1", "1|2|0"]),
    ("hmdb-no-split-files", ["{r}/o", "--hmdb51-splits", "{r}/hmdb-empty", *V],
     ["{r}/hmdb-empty", "_test_split1.txt"]),
    ("hmdb-all-unused", ["{r}/o", "--hmdb51-splits", "{r}/hmdb-unused", *V],
     ["--hmdb51-splits lists no samples", "name no clip"]),
    ("hmdb-split-number", ["{r}/o", "--hmdb51-splits", "{r}/hmdb", *V, "--split-number", "0"], ["--split-number 0"]),
    ("hmdb-nothing-on-disk", ["{r}/o", "--hmdb51-splits", "{r}/hmdb", *V],
     ["4 listed clips are not on disk", "April_09_brush_hair_u_nm_np1_ba_goo_0.avi"]),
]


@pytest.mark.parametrize("args, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused(world, cli_env, args, needles):
    fill = [a.replace("{r}", str(world)) for a in args]
    proc = run_cli(["pack", *fill, "--quiet"], cli_env, cwd=world)
    assert_refused(proc, [n.replace("{r}", str(world)) for n in needles], prefix=CLI)
    assert proc.stderr.count(CLI) == 1 and not (world / "o" / "manifest.json").exists()


def test_the_table_is_large_enough():
    assert len(CASES) >= 50
