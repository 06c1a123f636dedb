"""`summit-jobs report`: plots and summaries from metrics the real trainer wrote.

The runs are real (tiny CPU trainer launches): a chained run whose second
launch resumes from an older checkpoint and so logs two steps again, a
simulated run (exact accumulation) and a baseline without the temporal shift.
The run records around them (run.json, plan.json, exit-code files, job output)
are laid out the way submit and the job script write them.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from summit_jobs.runs import report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CLI = [sys.executable, "-m", "summit_jobs"]


def run_report(args, env=None, timeout=120):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=timeout, env=env, cwd=str(REPO))


def raw(run_dir: Path):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def last_per_step(records, kind):
    """The reference de-duplication, written independently of report.py: later lines win."""
    out = {}
    for r in records:
        if r["kind"] == kind:
            out[r["step"]] = r
    return [out[s] for s in sorted(out)]


def plan_json(env, tmp, *args):
    out = subprocess.run([sys.executable, "-m", "summit_jobs", *args, "--dry-run", "--json", "--epochs", "3"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["plan"]


def record_run(run: Path, job_ids, plan, logs):
    """The files submit and the job script leave in a run directory."""
    (run / "run.json").write_text(json.dumps({"name": run.name, "run_dir": str(run), "machine": "local",
                                              "job_ids": job_ids, "ssh": None, "embedded": True}))
    (run / "plan.json").write_text(json.dumps(plan))
    (run / "job.lsf").write_text("#!/bin/bash\n#BSUB -nnodes 1\n#BSUB -o tsm.%J.out\n")
    for jid, log in zip(job_ids, logs):
        (run / f"tsm.{jid}.out").write_text(log)
        (run / f"exitcode.{jid}").write_text("0\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Real trainer output: chained (with replayed steps), simulated (k = 2) and no-shift runs."""
    tmp = tmp_path_factory.mktemp("report")
    data = make_dataset(tmp / "data", train=8, val=4)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SUMMIT_JOBS_")}
    env["XDG_CONFIG_HOME"] = str(tmp / "xdg")
    env["XDG_DATA_HOME"] = str(tmp / "xdg-data")

    chained = tmp / "tsm-chained"
    args = tiny_args(chained, data, epochs=3, batch_per_gpu=2, test_last=2)
    run_ranks(1, args + ["--max-steps", "6"], tmp / "logs1", timeout=180)
    # The first job was killed after its epoch-end checkpoint (step 4) and before another one:
    # drop the step-6 checkpoint so the second job resumes at step 4 and trains steps 5 and 6 again.
    (chained / "checkpoints" / "ckpt-000000006.pt").unlink()
    run_ranks(1, args, tmp / "logs2", timeout=180)
    record_run(chained, ["101", "102"], plan_json(env, tmp, "submit", "--nodes", "1"),
               [(tmp / "logs1" / "rank0.log").read_text(), (tmp / "logs2" / "rank0.log").read_text()])

    sim = tmp / "tsm-simulated"
    run_ranks(1, tiny_args(sim, data, epochs=2, batch_per_gpu=2, accum_steps=2, test_last=1), tmp / "logs3",
              timeout=180)
    record_run(sim, ["201"], plan_json(env, tmp, "simulate", "--virtual-nodes", "4", "--nodes", "2"),
               [(tmp / "logs3" / "rank0.log").read_text()])

    noshift = tmp / "tsn-noshift"
    run_ranks(1, tiny_args(noshift, data, epochs=3, batch_per_gpu=2, test_last=2) + ["--no-shift"],
              tmp / "logs4", timeout=180)
    return {"chained": chained, "sim": sim, "noshift": noshift, "env": env, "tmp": tmp}


def check_png(path: Path):
    blob = path.read_bytes()
    assert blob[:8] == PNG_SIGNATURE, path
    assert len(blob) > 5000, (path, len(blob))
    with Image.open(path) as im:
        im.load()
        assert im.size[0] > 300 and im.size[1] > 200


def series(doc, fig, panel, label):
    for s in doc["figures"][fig]["panels"][panel]["series"]:
        if s["label"] == label:
            return s
    raise AssertionError(f"{fig}: no series {label!r}")


def test_chained_run_reads_as_one_run(runs):
    run = runs["chained"]
    records = raw(run)
    steps = [r["step"] for r in records if r["kind"] == "train"]
    assert steps.count(5) == 2 and steps.count(6) == 2, steps   # the trainer really replayed them

    out = run_report(["report", str(run)], env=runs["env"])
    assert out.returncode == 0, out.stderr
    folder = run / "report"
    for name in report.PLOTS:
        check_png(folder / name)
    doc = json.loads((folder / "report.json").read_text())

    train = last_per_step(records, "train")
    evals = last_per_step(records, "eval")
    assert [r["step"] for r in train] == list(range(1, 13))
    # The replayed steps are reported with the second launch's values.
    second = [r for r in records if r["kind"] == "train" and r["step"] == 5][-1]
    assert train[4]["loss"] == second["loss"]
    assert series(doc, "loss.png", 0, "train")["y"] == [r["loss"] for r in train]
    assert series(doc, "loss.png", 0, "eval")["y"] == [r["loss"] for r in evals]
    assert series(doc, "loss.png", 0, "eval")["x"] == [r["epoch"] + 1 for r in evals]
    assert series(doc, "accuracy.png", 0, "eval top-1")["y"] == [100 * r["top1"] for r in evals]
    assert series(doc, "accuracy.png", 0, "train top-1")["y"] == [100 * r["top1"] for r in train]
    assert series(doc, "lr.png", 0, "lr")["y"] == [r["lr"] for r in train]
    assert series(doc, "lr.png", 0, "lr")["x"] == [r["step"] for r in train]
    assert series(doc, "throughput.png", 0, "clips/s")["y"] == [r["clips_per_s"] for r in train]
    assert series(doc, "throughput.png", 1, "data wait")["y"] == [100 * r["data_wait_frac"] for r in train]
    # 4 steps per epoch: the epoch axis puts step s at s / 4; the time axis never goes back.
    assert series(doc, "loss.png", 0, "train")["x"] == [s / 4 for s in range(1, 13)]
    t = series(doc, "loss.png", 1, "train")["x"]
    assert t == sorted(t)

    s = doc["summary"]
    assert s["launches"] == 2 and s["replayed_steps"] == 2 and s["steps"] == 12 and s["complete"]
    assert s["final_eval_top1"] == evals[-1]["top1"]
    assert s["best_eval_top1"] == max(r["top1"] for r in evals)
    summary = [r for r in records if r.get("summary")][-1]
    assert (s["test_top1_mean"], s["test_top1_std"]) == (summary["top1"], summary["top1_std"])
    jobs = {j["job_id"]: j for j in s["jobs"]}
    assert jobs["101"]["exit_code"] == 0 and "stopped at step 6 (--max-steps)" in jobs["101"]["ended"]
    assert jobs["102"]["resumed_from_step"] == 4 and jobs["102"]["ended"] == "training complete"
    assert "jobs in the chain" in out.stdout and "2 steps replayed" in out.stdout
    assert "+- " in out.stdout   # the multi-clip test, mean +- std
    md = (folder / "report.md").read_text()
    assert "![accuracy](accuracy.png)" in md and "| final eval top-1 |" in md

    # A second report replaces the first one's files (they are recognised as its own).
    again = run_report(["report", str(run)], env=runs["env"])
    assert again.returncode == 0, again.stderr


def test_simulated_run_shows_virtual_and_physical_shapes(runs):
    out = run_report(["report", str(runs["sim"]), "--out", str(runs["tmp"] / "sim-report")], env=runs["env"])
    assert out.returncode == 0, out.stderr
    # The plan (submit's JSON summary) does not say what a rank ran on: ranks, not GPUs.
    assert "virtual shape" in out.stdout and "4 nodes, 8 ranks" in out.stdout and "GPU" not in out.stdout
    assert "physical shape" in out.stdout and "2 nodes, 4 ranks, k = 2 accumulation steps" in out.stdout
    doc = json.loads((runs["tmp"] / "sim-report" / "report.json").read_text())
    sh = doc["summary"]["shapes"]
    assert (sh["virtual_nodes"], sh["virtual_gpus"], sh["physical_nodes"], sh["physical_gpus"],
            sh["accum_steps"], sh["simulated"]) == (4, 8, 2, 4, 2, True)
    records = raw(runs["sim"])
    assert all(r["accum_steps"] == 2 for r in records if r["kind"] == "train")
    assert series(doc, "lr.png", 0, "lr")["y"] == [r["lr"] for r in last_per_step(records, "train")]


def test_compare_puts_both_runs_in_plots_and_table(runs):
    out_dir = runs["tmp"] / "cmp"
    out = run_report(["report", str(runs["chained"]), "--compare", str(runs["noshift"]), "--out", str(out_dir),
                      "--json"], env=runs["env"])
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    a, b = res["summary"], res["compare"]
    assert res["difference"]["final_eval_top1"] == pytest.approx(a["final_eval_top1"] - b["final_eval_top1"])
    assert res["difference"]["test_top1_mean"] == pytest.approx(a["test_top1_mean"] - b["test_top1_mean"])
    assert "points" in res["verdict"]
    doc = json.loads((out_dir / "report.json").read_text())
    base = last_per_step(raw(runs["noshift"]), "eval")
    assert series(doc, "accuracy.png", 0, "tsn-noshift: eval top-1")["y"] == [100 * r["top1"] for r in base]
    assert series(doc, "accuracy.png", 0, "tsm-chained: eval top-1")["y"] == \
        [100 * r["top1"] for r in last_per_step(raw(runs["chained"]), "eval")]
    for name in report.PLOTS:
        check_png(out_dir / name)
    text = run_report(["report", str(runs["chained"]), "--compare", str(runs["noshift"]), "--out", str(out_dir)],
                      env=runs["env"])
    assert text.returncode == 0 and "difference" in text.stdout and "points" in text.stdout


def legend_labels(panel) -> list:
    """The legend entries matplotlib makes of a panel of report.json, drawn as plots.py draws it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from summit_jobs.runs import plots
    fig, ax = plt.subplots()
    plots._draw_panel(ax, panel)
    labels = ax.get_legend_handles_labels()[1]
    plt.close(fig)
    return labels


def test_the_simulated_run_beside_the_real_one(runs):
    """simulate's run (k = 2) drawn with a real run beside it: both in every plot, each series with points
    and one legend entry, chain boundaries as marks with no entry, the GPU-less runs' throughput per rank."""
    out_dir = runs["tmp"] / "sim-vs-real"
    out = run_report(["report", str(runs["sim"]), "--compare", str(runs["chained"]), "--out", str(out_dir), "--quiet"],
                     env=runs["env"])
    assert out.returncode == 0, out.stderr
    doc = json.loads((out_dir / "report.json").read_text())
    assert set(doc["files"]) == set(report.PLOTS) | {"report.md"}
    for name, fig in doc["figures"].items():
        check_png(out_dir / name)
        assert fig["note"] == "thin vertical marks: where a chain link resumed the run (tsm-chained: 1 chain boundary)"
        for panel in fig["panels"]:
            labels = [s["label"] for s in panel["series"]]
            assert all(s["x"] for s in panel["series"]) and len(labels) == len(set(labels)), labels
            assert {label.split(": ")[0] for label in labels} == {"tsm-simulated", "tsm-chained"}, labels
            drawn = legend_labels(panel)
            assert len(drawn) == len(set(drawn)) == len(labels) + len({h["label"] for h in panel["hlines"]}) + len(
                {p["label"] for p in panel["points"]}), drawn
    assert doc["figures"]["throughput.png"]["panels"][2]["ylabel"] == "clips/s per rank"


def test_a_chain_of_many_links_keeps_its_legend_to_the_series(runs, tmp_path):
    """19 launches: 18 boundaries in every panel, none in a legend; a run without COMPLETE says so; a run whose
    plan gave its ranks no GPU draws its throughput per CPU rank."""
    run = tmp_path / "long-chain"
    run.mkdir()
    records, events, t = [], [], 1_700_000_000.0
    for link in range(19):
        events.append({"event": "launch", "job": str(100 + link), "time": t - 1, "mode": "train", "step": 4 * link,
                       **({"resumed_from": "ckpt"} if link else {})})
        for step in range(4 * link + 1, 4 * link + 5):
            records.append({"kind": "train", "step": step, "epoch": (step - 1) // 8, "time": t, "loss": 3.0 / step,
                            "top1": step / 100, "lr": 0.1, "clips_per_s": 8.0, "data_wait_frac": 0.1, "ranks": 2})
            t += 1.0
        t += 600.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "plan.json").write_text(json.dumps({"nodes": 1, "ranks": 2, "jsrun": {"g": 0}}))
    out = run_report(["report", str(run), "--quiet"], env=runs["env"])
    assert out.returncode == 0, out.stderr
    assert "1 node, 2 CPU ranks" in out.stdout
    doc = json.loads((run / "report" / "report.json").read_text())
    loss = doc["figures"]["loss.png"]
    assert loss["title"] == "Loss: long-chain (not complete)"
    assert loss["note"] == "thin vertical marks: where a chain link resumed the run (18 chain boundaries)"
    for fig in doc["figures"].values():
        for panel in fig["panels"]:
            assert len(panel["vlines"]) == 18
            assert legend_labels(panel) == [s["label"] for s in panel["series"]]
    assert doc["figures"]["throughput.png"]["panels"][2]["ylabel"] == "clips/s per CPU rank"
    assert series(doc, "throughput.png", 2, "clips/s per CPU rank")["y"] == [4.0] * len(records)


def test_scaling_projection_plot(runs, tmp_path):
    run = tmp_path / "with-scaling"
    shutil.copytree(runs["sim"], run, ignore=shutil.ignore_patterns("report", "checkpoints"))
    rows = subprocess.run([sys.executable, "-m", "summit_jobs", "--machine", "summit", "scaling", "--json",
                           "--nodes-list", "1,8,64"], capture_output=True, text=True, timeout=60, env=runs["env"])
    assert rows.returncode == 0, rows.stderr
    (run / "scaling.json").write_text(rows.stdout)
    out = run_report(["report", str(run)], env=runs["env"])
    assert out.returncode == 0, out.stderr
    check_png(run / "report" / "scaling.png")
    doc = json.loads((run / "report" / "report.json").read_text())
    assert doc["figures"]["scaling.png"]["rows"] == json.loads(rows.stdout)
    assert "projected 64 nodes" in out.stdout


def _one_paragraph_error(out):
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stderr.strip()
    assert "\n\n" not in out.stderr.strip()
    return out.stderr


def test_errors_are_one_paragraph(runs, tmp_path):
    env = runs["env"]
    err = _one_paragraph_error(run_report(["report", str(tmp_path / "nowhere")], env=env))
    assert "no run named" in err
    (tmp_path / "empty-run").mkdir()
    err = _one_paragraph_error(run_report(["report", str(tmp_path / "empty-run")], env=env))
    assert "metrics.jsonl" in err
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "metrics.jsonl").write_text('{"kind": "train", "st')
    err = _one_paragraph_error(run_report(["report", str(tmp_path / "torn")], env=env))
    assert "no training or evaluation records" in err
    bad = tmp_path / "bad-scaling"
    shutil.copytree(runs["sim"], bad, ignore=shutil.ignore_patterns("report", "checkpoints"))
    (bad / "scaling.json").write_text('{"nodes": 1}')
    err = _one_paragraph_error(run_report(["report", str(bad)], env=env))
    assert "scaling --json" in err
    # Files another program wrote are never replaced without --force.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "report.md").write_text("mine\n")
    err = _one_paragraph_error(run_report(["report", str(runs["sim"]), "--out", str(foreign)], env=env))
    assert "--force" in err and (foreign / "report.md").read_text() == "mine\n"
    ok = run_report(["report", str(runs["sim"]), "--out", str(foreign), "--force"], env=env)
    assert ok.returncode == 0, ok.stderr
    assert (foreign / "report.md").read_text() != "mine\n"


def test_run_found_by_name_through_the_index(runs, tmp_path):
    """A run submitted from here is found by its name, as status and logs find it."""
    from summit_jobs.runs import records as runs_mod
    env = dict(runs["env"], XDG_DATA_HOME=str(tmp_path / "data-home"))
    rec = json.loads((runs["sim"] / "run.json").read_text())
    index = tmp_path / "data-home" / "summit-jobs" / "runs"
    index.mkdir(parents=True)
    (index / f"{rec['name']}-0123456789.json").write_text(json.dumps(rec))
    assert runs_mod.RECORD == "run.json"
    out = run_report(["report", "tsm-simulated", "--out", str(tmp_path / "by-name"), "--json"], env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["summary"]["run"] == "tsm-simulated"


def test_deduplication_and_queue_gaps():
    """Pure: last record per step wins; waits between launches leave the time axis."""
    def rec(step, t, loss, epoch=0, kind="train"):
        return {"kind": kind, "step": step, "epoch": epoch, "time": t, "loss": loss, "top1": 0.5, "lr": 0.1,
                "clips_per_s": 10.0, "data_wait_frac": 0.1, "step_time": 1.0}
    records = [rec(1, 100, 3.0), rec(2, 101, 2.9), rec(3, 102, 2.8),           # launch 1, killed after step 3
               rec(2, 5000, 2.5), rec(3, 5001, 2.4), rec(4, 5002, 2.3, epoch=1),   # resumed from step 1
               rec(4, 5003, 2.0, kind="eval", epoch=1)]
    text = "\n".join(json.dumps(r) for r in records) + '\n{"kind": "train", "ste'
    m = report.deduplicate(report.parse_metrics(text))
    assert [r["loss"] for r in m.train] == [3.0, 2.5, 2.4, 2.3]
    assert m.launches == 2 and m.replayed == 2
    assert m.wall_seconds == pytest.approx(4903)
    assert m.active_seconds == pytest.approx(4.0)      # the queue wait counts as one typical interval
    # Epoch 0 ends at step 3; the unfinished epoch 1 borrows its length.
    assert report.fractional_epochs(m.train) == pytest.approx([1 / 3, 2 / 3, 1.0, 1 + 1 / 3])


def test_report_modules_do_not_import_torch():
    code = ("import sys; import summit_jobs.runs.report, summit_jobs.cli.report, summit_jobs.runs.plots; "
            "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert out.returncode == 0, out.stderr


def test_how_each_job_of_a_chain_ended_is_read_from_its_output():
    """The report names how every link ended, from the lines the trainer and the job script print."""
    resumed, how = report._job_ending("[trainer 10:00:00] resumed from /r/ckpt-000000160.pt at step 160 (epoch 8)\n"
                                      "[trainer 10:00:30] stopping at step 293 (signal SIGUSR2): checkpoint saved\n")
    assert (resumed, how) == (160, "stopped at step 293 (signal SIGUSR2), checkpoint saved")
    script_says = "summit-jobs: the run in /r is already complete; nothing to do for job 4.\n"
    assert report._job_ending(script_says) == (None, "nothing left to do (run already complete)")
    assert report._job_ending("") == (None, "")
