"""Bad input to pack --modality flow: a table of refusals.

Every case is a command a user could type over a small real dataset (JPEG
frame folders, mmaction2 flow folders, MP4 files), run through the real entry
point in a real process. Each must end with a non-zero exit, no traceback, and
a message naming the value that was refused. A clip that cannot give flow (one
frame, a missing flow_y frame) is skipped like an undecodable one; when it is
the only clip, nothing can be packed and pack says why, naming it.
"""
import numpy as np
import pytest
from PIL import Image

from badinput import assert_refused
from helpers import run_cli

CLI = "summit-jobs: error:"


def _frames(d, n: int, tmpl: str = "img_{:05d}.jpg") -> None:
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(1, n + 1):
        Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(d / tmpl.format(i))


def _flows(d, n: int, skip=()) -> None:
    d.mkdir(parents=True)
    for t in range(1, n + 1):
        for axis in "xy":
            if f"{axis}{t}" not in skip:
                Image.new("L", (32, 32), 128).save(d / f"flow_{axis}_{t:05d}.jpg")


def _one_frame_mp4(path) -> None:
    import av
    path.parent.mkdir(parents=True)
    with av.open(str(path), mode="w", format="mp4") as c:
        st = c.add_stream("libx264", rate=25)
        st.width = st.height = 32
        st.pix_fmt = "yuv420p"
        for packet in st.encode(av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")):
            c.mux(packet)
        for packet in st.encode():
            c.mux(packet)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("badflow")
    _frames(root / "rgb" / "clip", 3)
    (root / "rgb" / "train_list.txt").write_text("clip 3 0\n")
    _frames(root / "single" / "lonely", 1)
    (root / "single" / "train_list.txt").write_text("lonely 1 0\n")
    _flows(root / "noy" / "clip", 2, skip={"y2"})
    (root / "noy" / "train_list.txt").write_text("clip 2 0\n")
    _flows(root / "short" / "clip", 2)
    (root / "short" / "train_list.txt").write_text("clip 3 0\n")
    _flows(root / "corrupt" / "clip", 2)
    bad = root / "corrupt" / "clip" / "flow_x_00001.jpg"
    bad.write_bytes(bad.read_bytes()[:100])
    (root / "corrupt" / "train_list.txt").write_text("clip 2 0\n")
    _one_frame_mp4(root / "vids" / "train" / "still" / "still.mp4")
    return root


F = ["--modality", "flow"]
RGB = ["{r}/rgb", "{o}", "--filename-tmpl", "img_{{:05d}}.jpg"]

# (case id, arguments after `pack` with {r} for the fixture folder, needles)
CASES = [
    ("bound-zero", RGB + F + ["--flow-bound", "0"], [CLI, "--flow-bound 0.0", "positive"]),
    ("bound-negative", RGB + F + ["--flow-bound", "-20"], [CLI, "--flow-bound -20.0", "positive"]),
    ("bound-nan", RGB + F + ["--flow-bound", "nan"], [CLI, "--flow-bound nan", "positive"]),
    ("bound-inf", RGB + F + ["--flow-bound", "inf"], [CLI, "--flow-bound inf", "positive"]),
    ("bound-word", RGB + F + ["--flow-bound", "twenty"], ["'twenty'", "--flow-bound"]),
    ("algorithm-unknown", RGB + F + ["--flow-algorithm", "lucas-kanade"], ["'lucas-kanade'", "tvl1", "farneback"]),
    ("modality-unknown", RGB + ["--modality", "depth"], ["'depth'", "rgb", "flow"]),
    ("bound-without-flow", RGB + ["--flow-bound", "10"], [CLI, "--flow-bound 10.0", "--modality flow"]),
    ("algorithm-without-flow", RGB + ["--flow-algorithm", "farneback"],
     [CLI, "--flow-algorithm farneback", "--modality flow"]),
    ("one-frame-folder", ["{r}/single", "{o}", "--filename-tmpl", "img_{{:05d}}.jpg"] + F,
     [CLI, "lonely", "at least 2 frames"]),
    ("one-frame-video", ["{r}/vids", "{o}", "--flow-algorithm", "farneback"] + F,
     [CLI, "still.mp4", "at least 2 frames"]),
    ("missing-flow-y", ["{r}/noy", "{o}"] + F, [CLI, "flow_y_00002.jpg"]),
    ("list-counts-more-fields", ["{r}/short", "{o}"] + F, [CLI, "flow_x_00003.jpg"]),
    ("corrupt-flow-x", ["{r}/corrupt", "{o}"] + F, [CLI, "flow_x_00001.jpg"]),
    ("flow-tmpl-outside", ["{r}/noy", "{o}", "--filename-tmpl", "../flow_{{}}_{{:05d}}.jpg"] + F,
     [CLI, "'../flow_{}_{:05d}.jpg'", "outside"]),
    ("rgb-given-flow-tmpl", ["{r}/rgb", "{o}", "--filename-tmpl", "flow_{{}}_{{:05d}}.jpg"],
     [CLI, "'flow_{}_{:05d}.jpg'"]),
]


@pytest.mark.parametrize("args,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pack_flow_refuses(world, tmp_path, cli_env, args, needles):
    r = run_cli(["pack", *[a.format(r=world, o=tmp_path / "out") for a in args]], cli_env, timeout=120)
    assert_refused(r, needles)
    assert not (tmp_path / "out" / "manifest.json").exists()
