"""CLI commands of the data path: synth, pack, stage-data.

Heavy imports (numpy, PIL, PyAV) happen inside the commands, so that
``summit-jobs --help`` and the job commands start fast.
"""
from __future__ import annotations

import json
import shlex
import sys
from typing import Optional, Tuple

import click

from summit_jobs.cli.submit import State, cli  # noqa: F401
from summit_jobs.cli.types import refuse_empty_argument
from summit_jobs.errors import UserError


@cli.command("synth")
@click.argument("out", type=click.Path(file_okay=False), callback=refuse_empty_argument("OUT", "an output folder"))
@click.option("--videos-per-class", default=20, show_default=True,
              help="Videos per class (8 classes), train and val together.")
@click.option("--val-fraction", default=0.25, show_default=True, help="Share of each class held out for val.")
@click.option("--frames", default=16, show_default=True, help="Frames per video.")
@click.option("--size", default=96, show_default=True, help="Frame side in pixels (square, even).")
@click.option("--seed", default=0, show_default=True, help="Same seed, same dataset.")
@click.option("--layout", "layouts", type=click.Choice(["rawframes", "videos", "both"]), default="both",
              show_default=True, help="Write JPEG frame folders (rawframes), MP4 files (videos), or both.")
@click.option("--force", is_flag=True, help="Write into OUT even if it is not empty.")
@click.option("--quiet", is_flag=True, help="No progress output (a bar on a terminal, plain lines in logs).")
def synth_cmd(out: str, videos_per_class: int, val_fraction: float, frames: int, size: int, seed: int,
              layouts: str, force: bool, quiet: bool) -> None:
    """Write a small synthetic Kinetics-format dataset into OUT.

    Eight classes in four pairs that differ only in the direction of time
    (moving right/left, down/up, growing/shrinking, rotating clockwise/counter-
    clockwise). Every single frame has the same distribution in all classes,
    so a model that looks at frames one at a time stays at chance: only
    temporal modelling (TSM) can learn it.

    \b
    Writes OUT/rawframes/{train,val}_list.txt + frame folders (TSM/mmaction2 layout)
    and OUT/videos/{train,val}/<class>/<id>.mp4. Pack either with `summit-jobs pack`.
    """
    from summit_jobs import progress
    from summit_jobs.data import synth
    progress.check_environment(not quiet)
    lay = ("rawframes", "videos") if layouts == "both" else (layouts,)
    summary = synth.synth(synth.SynthOptions(out=out, videos_per_class=videos_per_class,
                                             val_fraction=val_fraction, frames=frames, size=size, seed=seed,
                                             layouts=lay), force=force, progress=not quiet)
    click.echo(f"synth: {summary['train_videos']} train + {summary['val_videos']} val videos, "
               f"{summary['classes']} classes, {frames} frames of {size}x{size} -> {out} "
               f"({', '.join(summary['layouts'])})")


@cli.command("pack")
@click.argument("paths", nargs=-1, metavar="[SRC] OUT", callback=refuse_empty_argument("SRC or OUT", "a folder"))
@click.option("--layout", type=click.Choice(["auto", "rawframes", "videos"]), default="auto", show_default=True,
              help="SRC's layout: rawframes (<split>_list.txt + img_00001.jpg folders) or videos "
                   "(<split>/<class>/<id>.mp4). auto looks at SRC.")
@click.option("--annotations", "annotations", multiple=True, metavar="CSV",
              help="Kinetics 400/600/700 as distributed: an annotation CSV (label,youtube_id,time_start,time_end,"
                   "split); repeat it for each split's file. The split column names the split (validate is val). "
                   "The clips are <youtube_id>_<start:06d>_<end:06d>.mp4 under --videos. Give OUT only.")
@click.option("--videos", metavar="DIR",
              help="With --annotations, --ucf101-splits or --hmdb51-splits: the folder of the videos "
                   "(Kinetics: DIR/<split>/ or DIR/ itself; UCF101 and HMDB51: DIR/<class>/<video>.avi).")
@click.option("--list", "list_opts", multiple=True, metavar="SPLIT=FILE",
              help="An mmaction2 list under any name, repeatable: video lists ('path label') or rawframe lists "
                   "('folder num_frames label'), told apart per file by the number of fields; PySlowFast's "
                   "'path label' CSVs too. SPLIT is train, val or test. Labels are class numbers from 0. "
                   "Give OUT only.")
@click.option("--root", metavar="DIR", help="With --list: the folder the listed paths are relative to. "
                                           "Default: each list's own folder.")
@click.option("--ucf101-splits", metavar="DIR",
              help="UCF101's ucfTrainTestlist folder (classInd.txt, trainlistNN.txt, testlistNN.txt); the test "
                   "list becomes the val split. Give OUT only, and --videos.")
@click.option("--hmdb51-splits", metavar="DIR",
              help="HMDB51's testTrainMulti_7030_splits folder (<class>_test_splitN.txt: 1 train, 2 test (the "
                   "val split), 0 unused). Give OUT only, and --videos.")
@click.option("--split-number", type=int, default=None,
              help="Which of the three official UCF101 / HMDB51 splits to pack. Default: 1.")
@click.option("--filename-tmpl", default=None,
              help="Rawframes: the frame file name, with one integer field counted from 1 "
                   "[default: img_{:05d}.jpg; with --modality flow: flow_{}_{:05d}.jpg, mmaction2's pre-extracted "
                   "flow_x/flow_y frames; give a one-field template there to compute flow from RGB frames].")
@click.option("--modality", type=click.Choice(["rgb", "flow"]), default="rgb", show_default=True,
              help="rgb: the frames; flow: optical flow between consecutive frames at the packed size, stored as "
                   "8-bit flow_x/flow_y JPEG pairs (TSN / mmaction2 convention; needs opencv-contrib-python-headless).")
@click.option("--flow-algorithm", type=click.Choice(["tvl1", "farneback"]), default=None,
              help="With --modality flow: TV-L1 (accurate, slow; the default) or Farneback (much faster).")
@click.option("--flow-bound", type=float, default=None,
              help="With --modality flow: motion clipped to +-this many pixels before the 0..255 mapping "
                   "[default: 20].")
@click.option("--seed", default=0, show_default=True,
              help="Seed of the order samples are written in: each split shuffled with every class spread "
                   "evenly, so each node's share of the shards (stage-data --policy partition) holds every "
                   "class. Same input and seed, same bytes.")
@click.option("--no-shuffle", "no_shuffle", is_flag=True, hidden=True)
@click.option("--shard-size", default="2GB", show_default=True,
              help="Target shard size; a shard is closed once it reaches it. HPSS wants >= 512MB.")
@click.option("--short-side", default=256, show_default=True,
              help="Downscale frames so the shorter side is this many pixels (never upscales; 0 keeps).")
@click.option("--fps", type=float, help="Videos: keep about this many frames per second (default: all frames).")
@click.option("--quality", default=90, show_default=True, help="JPEG quality of re-encoded frames.")
@click.option("--workers", "-j", default=0, help="Worker processes. Default: one per CPU core.")
@click.option("--classes", "classes_file", type=click.Path(dir_okay=False),
              help="Class names, one per line in label order. Default: SRC/classes.txt, else the class "
                   "folders (videos), class_NNN (rawframes and --list), the sorted labels (--annotations).")
@click.option("--name", help="Dataset name in the manifest. Default: the folder name of SRC (or of --videos).")
@click.option("--hash", "algo", type=click.Choice(["sha256", "blake3", "blake2b"]), default="sha256",
              show_default=True,
              help="Shard hash recorded in the manifest. blake3 is about 5x faster to verify on x86 "
                   "(staging is then limited by the disks, not the CPU) but needs the blake3 package "
                   "wherever the data is staged; sha256 needs nothing.")
@click.option("--force", is_flag=True,
              help="Pack again into an OUT that holds a finished or different pack. Over a finished pack the new "
                   "one is built in OUT/.pack-next and swapped in once complete: the old one stays usable until "
                   "then (OUT needs room for both).")
@click.option("--quiet", is_flag=True, help="No progress output (a bar on a terminal, plain lines in logs).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def pack_cmd(paths: Tuple[str, ...], layout: str, annotations: Tuple[str, ...], videos: Optional[str],
             list_opts: Tuple[str, ...], root: Optional[str], ucf101_splits: Optional[str],
             hmdb51_splits: Optional[str], split_number: Optional[int], filename_tmpl: Optional[str], modality: str,
             flow_algorithm: Optional[str], flow_bound: Optional[float], seed: int, no_shuffle: bool,
             shard_size: str, short_side: int, fps: Optional[float], quality: int, workers: int,
             classes_file: Optional[str], name: Optional[str], algo: str, force: bool, quiet: bool,
             as_json: bool) -> None:
    """Pack a video dataset into tar shards + manifest.json in OUT.

    The input is a SRC folder (rawframes or videos layout) or the lists the
    dataset is distributed with: Kinetics annotation CSVs, mmaction2 or
    PySlowFast lists, UCF101 or HMDB51 split files. Listed videos missing from
    disk are counted and listed in OUT/pack-report.json (and counted in the
    manifest), never fatal.

    Parallel over CPU cores, deterministic (the same input gives the same
    bytes), resumable: run the same command again after an interruption and it
    continues after the last finished shard. Videos or frames that cannot be
    decoded are skipped, counted, and listed in OUT/pack-report.json.

    \b
    Examples:
      summit-jobs pack data/synth/rawframes data/synth-shards --shard-size 50MB
      summit-jobs pack /data/kinetics400/videos /gpfs/.../k400-shards --fps 25
      summit-jobs pack k400-shards --annotations k400/annotations/train.csv \\
          --annotations k400/annotations/val.csv --videos k400
      summit-jobs pack shards --list train=kinetics400_train_list_videos.txt \\
          --list val=kinetics400_val_list_videos.txt --root data/kinetics400/videos
      summit-jobs pack ucf-shards --ucf101-splits ucfTrainTestlist --videos UCF-101
      summit-jobs pack hmdb-shards --hmdb51-splits testTrainMulti_7030_splits --videos hmdb51_org
      summit-jobs pack ucf-flow --ucf101-splits ucfTrainTestlist --videos UCF-101 --modality flow
    """
    from summit_jobs.data import pack as pack_mod
    from summit_jobs import progress
    progress.check_environment(not quiet)
    inputs, src, out = _pack_inputs(paths, annotations, videos, list_opts, root, ucf101_splits, hmdb51_splits,
                                    split_number)
    flow_opts = _flow_options(modality, filename_tmpl, flow_algorithm, flow_bound)
    opts = pack_mod.PackOptions(src=src, out=out, layout=layout, shard_size=pack_mod.parse_size(shard_size),
                                short_side=short_side, fps=fps, quality=quality, workers=workers, name=name,
                                algo=algo, seed=seed, shuffle=not no_shuffle, **flow_opts)
    summary = pack_mod.pack(opts, force=force, progress=not quiet, classes_file=classes_file, inputs=inputs)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_pack_summary(summary)


def _flow_options(modality: str, filename_tmpl: Optional[str], algorithm: Optional[str],
                  bound: Optional[float]) -> dict:
    """The modality's defaults; a flow option given for an RGB pack is refused rather than ignored."""
    from summit_jobs.data import flow
    if modality == "rgb":
        for name, value in (("--flow-algorithm", algorithm), ("--flow-bound", bound)):
            if value is not None:
                raise UserError(f"{name} {value} applies only to optical flow: add --modality flow, or drop it.")
        return {"modality": "rgb", "filename_tmpl": filename_tmpl or "img_{:05d}.jpg"}
    return {"modality": "flow", "filename_tmpl": filename_tmpl or flow.FLOW_TMPL,
            "flow_algorithm": algorithm or "tvl1", "flow_bound": flow.DEFAULT_BOUND if bound is None else bound}


def _pack_inputs(paths: Tuple[str, ...], annotations: Tuple[str, ...], videos: Optional[str],
                 list_opts: Tuple[str, ...], root: Optional[str], ucf101_splits: Optional[str],
                 hmdb51_splits: Optional[str], split_number: Optional[int]):
    """(the reader and its files, the folder the samples live in, OUT) from pack's arguments."""
    import os
    from summit_jobs.data import datalists
    chosen = [k for k, v in (("--annotations", annotations), ("--list", list_opts),
                             ("--ucf101-splits", ucf101_splits), ("--hmdb51-splits", hmdb51_splits)) if v]
    if len(chosen) > 1:
        raise UserError(f"{' and '.join(chosen)} are two inputs: pack one dataset at a time.")
    if split_number is not None and not (ucf101_splits or hmdb51_splits):
        raise UserError(f"--split-number {split_number} applies only to --ucf101-splits or --hmdb51-splits: "
                        "add one, or drop it.")
    split_number = 1 if split_number is None else split_number
    if not chosen:
        if len(paths) != 2:
            raise UserError(f"pack takes SRC and OUT (got {len(paths)} paths), or OUT with --annotations, --list, "
                            "--ucf101-splits or --hmdb51-splits.")
        return datalists.Inputs(videos=videos, root=root), paths[0], paths[1]
    if len(paths) != 1:
        raise UserError(f"with {chosen[0]}, give only OUT (got {len(paths)} paths: {' '.join(paths)}); the videos "
                        "are found through " + ("--root." if chosen[0] == "--list" else "--videos DIR."))
    kind = {"--annotations": "kinetics", "--list": "lists", "--ucf101-splits": "ucf101",
            "--hmdb51-splits": "hmdb51"}[chosen[0]]
    lists = tuple(datalists.parse_list_option(x) for x in list_opts)
    inputs = datalists.Inputs(kind=kind, annotations=annotations, lists=lists, videos=videos, root=root,
                              splits_dir=ucf101_splits or hmdb51_splits, split_number=split_number)
    src = videos or root or (os.path.dirname(os.path.abspath(lists[0][1])) if lists else ".")
    return inputs, src, paths[0]


def _print_pack_summary(summary: dict) -> None:
    """One line on stdout (with the missing count, when there is one), the skipped videos on stderr."""
    from summit_jobs.data import pack as pack_mod
    rate = summary["samples"] / max(summary["seconds"], 1e-9)
    line = (f"pack: {summary['samples']} videos in {summary['shards']} shards "
            f"({pack_mod.human_bytes(summary['bytes'])}) -> {summary['manifest']}; "
            f"{rate:.1f} videos/s on {summary['workers']} workers")
    if summary["resumed_shards"]:
        line += f"; resumed after {summary['resumed_shards']} finished shards"
    if summary["missing"]:
        line += f"; {summary['missing']} listed videos missing from disk (listed in {summary['report']})"
    click.echo(line)
    if summary["skipped"]:
        click.echo(f"pack: skipped {summary['skipped']} unreadable videos (listed in "
                   f"{summary['report']}), for example: {summary['skipped_samples'][0]['error']}", err=True)


@cli.command("stage-data")
@click.option("--manifest", "-M", required=True, metavar="MANIFEST",
              help="The dataset's manifest.json (from `summit-jobs pack`), readable here.")
@click.option("--nodes", "-n", required=True, type=int, help="Nodes of the training job (placement of hop 2).")
@click.option("--policy", type=click.Choice(["partition", "replicate"]), default="partition", show_default=True,
              help="partition: each node gets 1/N of the training shards; replicate: every node gets all. "
                   "Validation shards go to every node in both.")
@click.option("--transport", type=click.Choice(["posix", "hpss"]), default="posix", show_default=True,
              help="Hop 1 source: a folder (posix) or the HPSS tape archive (hsi/htar; login or transfer node).")
@click.option("--source", metavar="PATH",
              help="Folder (posix) or HPSS folder (hpss) holding the shards. Default: the manifest's folder.")
@click.option("--htar", metavar="ARCHIVE", help="hpss: the shards are members of this htar archive (in HPSS).")
@click.option("--dest", metavar="DIR",
              help="Folder on the parallel file system for hop 1. Default: none when the source is a posix "
                   "folder (the shards are already on a file system), else required.")
@click.option("--jobs", "-j", default=4, show_default=True, help="Parallel transfers in hop 1.")
@click.option("--retries", default=3, show_default=True, help="Retries per transfer (exponential backoff).")
@click.option("--retry-delay", default=2.0, show_default=True, help="Seconds before the first retry; doubles.")
@click.option("--to-nvme", is_flag=True,
              help="Embedded machine only: also run hop 2 here, one process per virtual node, into each "
                   "virtual node's NVMe folder (what the job's staging step does).")
@click.option("--dry-run", is_flag=True, help="Print the plan (per node shards, bytes, estimated time); copy nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan or summary as JSON.")
@click.option("--force", is_flag=True, help="Replace a manifest in --dest that describes another dataset.")
@click.option("--quiet", is_flag=True, help="No progress output (a bar on a terminal, plain lines in logs).")
@click.pass_obj
def stage_data_cmd(state: State, manifest: str, nodes: int, policy: str, transport: str, source: Optional[str],
                   htar: Optional[str], dest: Optional[str], jobs: int, retries: int, retry_delay: float,
                   to_nvme: bool, dry_run: bool, as_json: bool, force: bool, quiet: bool) -> None:
    """Stage a packed dataset: archive -> parallel file system -> node-local NVMe.

    Hop 1 runs here (on a login or data transfer node: HPSS is not reachable
    from compute nodes): every shard is fetched under a temporary name,
    verified against the manifest's hash and renamed; shards already present
    and verified are skipped, so an interrupted run is resumed by running it
    again. Hop 2 runs inside the job (`submit --data DEST/manifest.json` adds
    the step): one rank per node copies and verifies that node's share.

    \b
    Examples:
      summit-jobs --machine summit stage-data -M k400/manifest.json --nodes 256 --dry-run
      summit-jobs stage-data -M k400/manifest.json --transport hpss \\
          --htar /home/me/k400.tar --dest $MEMBERWORK/abc123/k400 --nodes 256
      summit-jobs stage-data -M shards/manifest.json --nodes 2 --to-nvme     (local demo)
    """
    from summit_jobs import progress
    from summit_jobs.data import staging

    progress.check_environment(not (quiet or as_json or dry_run))
    manifest_path, data = staging.load_manifest(manifest)
    profile = state.profile
    staging.check_transfer_options(jobs, retries, retry_delay)
    src, pfs, hop1_needed = _hop1_paths(manifest_path, transport, source, htar, dest)
    plan = staging.plan_placement(profile, data, nodes, policy)
    hop1 = staging.Hop1(data, transport, src, pfs, htar=htar, jobs=jobs, retries=retries, retry_delay=retry_delay,
                        progress=not quiet and not as_json)
    train = _train_line(state.machine, plan, pfs, nodes, policy)
    if dry_run:
        _print_stage_plan(profile, plan, hop1, data, src, pfs, hop1_needed, transport, htar, nodes, policy, train,
                          as_json)
        return
    if to_nvme and not plan.node_local_nvme:
        raise UserError(f"--to-nvme: {profile.name} has no node-local NVMe in its profile (node.nvme_path), so "
                        "there is no hop 2 to run: drop --to-nvme, and the job's ranks read the shards from the "
                        f"folder: {train}")
    if plan.warnings and (to_nvme or any("larger than a node's NVMe" in w for w in plan.warnings)):
        raise UserError(plan.warnings[0] + ".")
    for w in plan.warnings:
        click.echo(f"stage-data: warning: {w}", err=True)
    result: dict = {"plan": plan.to_dict(), "submit": train}
    if hop1_needed:
        result["hop1"] = _run_hop1(hop1, force, as_json)
    if to_nvme:
        result["hop2"] = _run_local_hop2(profile, pfs / _manifest_name(), nodes, policy, quiet, as_json)
    elif not as_json:
        click.echo(("stage-data: hop 2 runs inside the job: " if plan.node_local_nvme else
                    f"stage-data: no hop 2 on {profile.name} (no node-local NVMe): the job's ranks read the shards "
                    f"from {pfs}: ") + train)
    if as_json:
        click.echo(json.dumps(result, indent=2))


def _train_line(machine: str, plan, pfs, nodes: int, policy: str) -> str:
    """The submit that trains on the staged shards, as submit takes it on this machine.

    With node-local NVMe the job's first step is hop 2: ``--data MANIFEST --stage-policy POLICY``. Without it,
    submit refuses --data (there is nothing to stage onto) and the ranks read the shards from the parallel file
    system folder itself, ``-- --data DIR``, every rank its share of all of them (no staging policy applies).
    ``--machine`` is named, so the line runs on the machine that was planned for from any shell."""
    head = f"summit-jobs --machine {shlex.quote(machine)} submit --nodes {nodes}"
    if plan.node_local_nvme:
        return f"{head} --data {shlex.quote(str(pfs / _manifest_name()))} --stage-policy {policy}"
    return f"{head} -- --data {shlex.quote(str(pfs))}"


def _manifest_name() -> str:
    from trainer import shards
    return shards.MANIFEST_NAME


def _hop1_paths(manifest_path, transport: str, source: Optional[str], htar: Optional[str],
                dest: Optional[str]):
    """(hop 1's source, the folder on the parallel file system, whether hop 1 copies anything)."""
    import os
    from pathlib import Path
    if htar and transport != "hpss":
        raise UserError("--htar names an archive in HPSS: use it with --transport hpss.")
    if transport == "hpss" and not (source or htar):
        raise UserError("--transport hpss needs --source HPSS_FOLDER (hsi get per shard) or --htar ARCHIVE "
                        "(htar -xvf with the shard names).")
    src = source or (str(Path(htar).parent) if htar else str(manifest_path.parent))
    if transport == "posix":
        src = os.path.abspath(os.path.expanduser(src))
    hop1_needed = transport == "hpss" or (dest is not None and os.path.abspath(os.path.expanduser(dest)) != src)
    if transport == "hpss" and not dest:
        raise UserError("--transport hpss needs --dest: the folder on the parallel file system the shards go to.")
    pfs = Path(os.path.abspath(os.path.expanduser(dest))) if hop1_needed else Path(src)
    return src, pfs, hop1_needed


def _print_stage_plan(profile, plan, hop1, data, src, pfs, hop1_needed: bool, transport: str,
                      htar: Optional[str], nodes: int, policy: str, train: str, as_json: bool) -> None:
    """--dry-run: per node shares, hop 1's commands and hop 2's line (one process per node, as the profile's
    scheduler starts it); nothing copied."""
    from summit_jobs import schedulers
    from summit_jobs.data import staging
    names = [str(s["name"]) for s in data["shards"]]
    if hop1_needed:
        hop1_lines = [f"hop 1 ({transport} -> parallel file system, here on the login/transfer node): "
                      f"{htar or src} -> {pfs}"] + [f"  {c}" for c in hop1.commands(names)]
    else:
        hop1_lines = [f"hop 1: none, the shards are already in {src}"]
    hop2_cmd = None
    if plan.node_local_nvme:
        python = sys.executable if profile.environment.python == "auto" else profile.environment.python
        program = (f"{shlex.quote(python)} -m trainer.stage --manifest {shlex.quote(str(pfs / _manifest_name()))} "
                   f"--dest {staging.nvme_data_dir(profile.node.nvme_path)} --policy {policy} --nodes {nodes}")
        hop2_cmd = schedulers.for_profile(profile).stage_launch_line(profile, nodes, program)
    if as_json:
        click.echo(json.dumps({"plan": plan.to_dict(), "hop1": hop1_lines, "hop2": hop2_cmd, "submit": train},
                              indent=2))
    else:
        click.echo(staging.describe(plan, hop1_lines, hop2_cmd or "", train))


def _run_hop1(hop1, force: bool, as_json: bool) -> dict:
    summary = hop1.run(force=force)
    if not as_json:
        click.echo(f"stage-data: hop 1: {count(summary['shards'], 'shard')} in {summary['dest']}: {summary['fetched']} "
                   f"fetched ({human(summary['fetched_bytes'])} at {human(summary['rate_bytes_per_s'])}/s), "
                   f"{summary['present']} already present; all verified")
    return summary


def _run_local_hop2(profile, manifest_on_pfs, nodes: int, policy: str, quiet: bool, as_json: bool) -> list:
    from summit_jobs.data import staging
    nodes_out = staging.run_local_hop2(profile, manifest_on_pfs, nodes, policy, quiet=quiet or as_json)
    if not as_json:
        for r in nodes_out:
            click.echo(f"stage-data: hop 2: {r['host']}: {count(r['shards'], 'shard')} ({human(r['bytes'])}) in "
                       f"{r['dest']}: {r['copied']} copied, {r['present']} already present; verified")
    return nodes_out


def count(n: int, word: str) -> str:
    """``1 shard``, ``2 shards`` (summit_jobs.wording, imported when a summary is printed)."""
    from summit_jobs import wording
    return wording.count(n, word)


def human(n: float) -> str:
    from trainer import units
    return units.human_bytes(n)
