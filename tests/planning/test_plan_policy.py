"""Every policy rule of the planner, at its limit and just past it."""
import pytest

from summit_jobs.profiles import machines
from summit_jobs.errors import UserError
from summit_jobs.planning.plan import JobOptions, linear_lr, make_plan


@pytest.fixture(scope="module")
def lassen():
    return machines.load("lassen")


@pytest.fixture(scope="module")
def local():
    return machines.load("local")


def opts(**kw):
    base = dict(nodes=1, run_dir="/gpfs/run", project="ABC123")
    base.update(kw)
    return JobOptions(**base)


def test_paper_shape_256_nodes(summit):
    plan = make_plan(summit, opts(nodes=256))
    assert plan.ranks == 1536 and plan.ranks_per_node == 6
    assert plan.global_batch == 12288
    assert plan.lr == pytest.approx(1.92)
    assert plan.bin == 3 and plan.walltime_minutes <= 12 * 60
    assert plan.jsrun.flags() == ["-n", "1536", "-r", "6", "-a", "1", "-g", "1", "-c", "7", "-b", "packed:7"]
    assert plan.node_hours == pytest.approx(256 * 12)


def test_node_layout(summit):
    plan = make_plan(summit, opts(nodes=256, layout="node"))
    assert plan.jsrun.flags() == ["-n", "256", "-r", "1", "-a", "6", "-g", "6", "-c", "42", "-b", "packed:7"]
    assert plan.ranks == 1536 and plan.global_batch == 12288


@pytest.mark.parametrize("batch,lr", [(8, 0.00125), (96, 0.015), (12288, 1.92), (49152, 7.68)])
def test_linear_lr_rule(batch, lr):
    assert linear_lr(batch, 0.00125) == pytest.approx(lr)


@pytest.mark.parametrize("nodes", [1, 4608])
def test_node_count_limits_ok(summit, nodes):
    assert make_plan(summit, opts(nodes=nodes)).nodes == nodes


@pytest.mark.parametrize("nodes,needle", [
    (0, "at least 1 node"), (-3, "at least 1 node"), ("1.5", "not a whole number"),
    ("abc", "not a whole number"), ("", "not a whole number"), (4609, "maximum job size of 4,608"),
])
def test_node_count_limits_bad(summit, nodes, needle):
    with pytest.raises(UserError, match=needle):
        make_plan(summit, opts(nodes=nodes))


@pytest.mark.parametrize("nodes,limit,bin_", [
    (4608, "24:00", 1), (2765, "24:00", 1), (2764, "24:00", 2), (922, "24:00", 2), (921, "12:00", 3),
    (92, "12:00", 3), (91, "6:00", 4), (46, "6:00", 4), (45, "2:00", 5), (1, "2:00", 5),
])
def test_walltime_bins_at_and_past_limit(summit, nodes, limit, bin_):
    plan = make_plan(summit, opts(nodes=nodes, walltime=limit))
    assert plan.bin == bin_ and plan.walltime == limit
    h, m = map(int, limit.split(":"))
    past = f"{h}:{m + 1:02d}"
    with pytest.raises(UserError, match=rf"above the {limit} limit of bin {bin_}"):
        make_plan(summit, opts(nodes=nodes, walltime=past))


def test_default_walltime_is_bin_maximum(summit):
    assert make_plan(summit, opts(nodes=256)).walltime == "12:00"
    assert make_plan(summit, opts(nodes=10)).walltime == "2:00"


@pytest.mark.parametrize("text,minutes", [("90", 90), ("1:30", 90), ("0:05", 5), ("12:00", 720)])
def test_walltime_formats_ok(summit, text, minutes):
    assert make_plan(summit, opts(nodes=256, walltime=text)).walltime_minutes == minutes


@pytest.mark.parametrize("text", ["1:00:00", "abc", "1:5", "0:60", "1h", "0", "-1:00", "1:00\n#BSUB -q debug"])
def test_walltime_formats_bad(summit, text):
    with pytest.raises(UserError, match=r"\[hours:\]minutes|at least one minute"):
        make_plan(summit, opts(nodes=256, walltime=text))


def test_debug_queue_limits(summit):
    assert make_plan(summit, opts(nodes=1, queue="debug", walltime="2:00")).queue == "debug"
    with pytest.raises(UserError, match="above the 2:00 limit"):
        make_plan(summit, opts(nodes=1, queue="debug", walltime="2:01"))
    with pytest.raises(UserError, match="does not allow chained jobs"):
        make_plan(summit, opts(nodes=1, queue="debug", chain=2))


def test_chain_at_and_past_the_queued_jobs_limit(summit):
    """Summit's batch queue rejects a user's 101st queued job at submit: the chain must not try."""
    assert make_plan(summit, opts(nodes=4, walltime="2:00", chain=100)).chain == 100
    with pytest.raises(UserError, match=r"--chain 101 would queue 101 jobs.*at most 100 queued jobs per user"):
        make_plan(summit, opts(nodes=4, walltime="2:00", chain=101))


def test_debug_queue_capped_by_bin_for_big_jobs(summit):
    # 256 nodes: bin 3 allows 12 h, debug only 2 h.
    with pytest.raises(UserError, match="queue 'debug'"):
        make_plan(summit, opts(nodes=256, queue="debug", walltime="3:00"))


def test_killable_only_bins_4_and_5(summit):
    assert make_plan(summit, opts(nodes=91, queue="killable", walltime="24:00")).bin == 4
    assert make_plan(summit, opts(nodes=1, queue="killable", walltime="24:00")).bin == 5
    with pytest.raises(UserError, match="only takes jobs in bins 4, 5"):
        make_plan(summit, opts(nodes=92, queue="killable"))
    with pytest.raises(UserError, match="24:00 limit"):
        make_plan(summit, opts(nodes=91, queue="killable", walltime="24:01"))


def test_batch_hm_node_limit(summit):
    assert make_plan(summit, opts(nodes=54, queue="batch-hm", walltime="24:00")).nodes == 54
    with pytest.raises(UserError, match="at most 54 nodes"):
        make_plan(summit, opts(nodes=55, queue="batch-hm"))


def test_unknown_queue(summit):
    with pytest.raises(UserError, match="Valid queues: batch, debug, killable, batch-hm"):
        make_plan(summit, opts(queue="gpu"))


def test_missing_project(summit, lassen, local):
    with pytest.raises(UserError, match=r"-P\).*--project NAME.*SUMMIT_JOBS_PROJECT"):
        make_plan(summit, opts(project=None))
    with pytest.raises(UserError, match=r"bank \(-G\)"):
        make_plan(lassen, opts(project=None))
    assert make_plan(local, opts(project=None)).account is None


@pytest.mark.parametrize("project", ["ABC 123", "A;B", "$(id)", "x\ny", "-P", ""])
def test_bad_project_names(summit, project):
    with pytest.raises(UserError):
        make_plan(summit, opts(project=project))


def test_quota_points_at_simulate(summit):
    assert make_plan(summit, opts(nodes=384, quota_nodes=384)).nodes == 384
    with pytest.raises(UserError) as exc:
        make_plan(summit, opts(nodes=385, quota_nodes=384))
    msg = str(exc.value)
    assert "quota of 384" in msg
    assert "summit-jobs --machine summit simulate --virtual-nodes 385 --project ABC123" in msg


@pytest.mark.parametrize("name", ["a b", "x;rm -rf /", "$(touch x)", "`id`", "a\nb", "-J", "x'y", 'x"y', "", "a" * 129])
def test_job_names_that_would_break_the_script(summit, name):
    with pytest.raises(UserError, match="job name"):
        make_plan(summit, opts(job_name=name))


def test_run_dir_with_newline_rejected(summit):
    with pytest.raises(UserError, match="newline"):
        make_plan(summit, opts(run_dir="/gpfs/a\nb"))


def test_data_turns_nvme_on_in_one_directive(summit):
    plan = make_plan(summit, opts(nodes=8, data="/gpfs/k400/manifest.json"))
    assert plan.alloc_flags == ("smt4", "nvme")
    assert "--data" in plan.trainer_argv
    assert plan.trainer_argv[plan.trainer_argv.index("--data") + 1] == "/mnt/bb/$USER/summit-jobs/data"


def test_lassen_shape(lassen):
    plan = make_plan(lassen, opts(nodes=4))
    assert plan.ranks == 16 and plan.account_flag == "-G" and plan.submit_mode == "stdin"
    assert plan.global_batch == 128 and plan.lr == pytest.approx(0.02)


def test_local_cpu_slots(local):
    plan = make_plan(local, opts(nodes=2, project=None))
    assert plan.ranks == 4
    assert plan.jsrun.flags() == ["-n", "4", "-r", "2", "-a", "1", "-c", "1", "-b", "packed:1"]
    with pytest.raises(UserError, match="maximum job size of 4"):
        make_plan(local, opts(nodes=5, project=None))


def test_accumulation_keeps_virtual_optimisation(summit):
    plan = make_plan(summit, opts(nodes=256, accum_steps=4, virtual_nodes=1024, quota_nodes=384))
    assert plan.global_batch == 49152 and plan.lr == pytest.approx(7.68)
    assert plan.virtual_ranks == 6144 and plan.ranks == 1536


@pytest.mark.parametrize("kw,needle", [
    (dict(chain=0), "--chain 0"), (dict(epochs=0), "--epochs 0"), (dict(clips_per_gpu=0), "clips per GPU"),
    (dict(warmup_epochs=200, epochs=100), "warm-up"), (dict(engine="mpi"), "engine"),
    (dict(layout="socket"), "layout"), (dict(stage_policy="all", data="/x/m.json"), "stage policy"),
])
def test_other_bad_options(summit, kw, needle):
    with pytest.raises(UserError, match=needle):
        make_plan(summit, opts(**kw))


def test_methods_reach_the_trainer_and_the_environment(summit):
    plan = make_plan(summit, opts(nodes=16, schedule="multigrid", short_cycle=True, optimizer="lars",
                                  compression="fp16", fusion_threshold=67108864))
    argv = list(plan.trainer_argv)
    assert argv[argv.index("--schedule") + 1] == "multigrid" and "--short-cycle" in argv
    assert argv[argv.index("--optimizer") + 1] == "lars" and argv[argv.index("--compression") + 1] == "fp16"
    assert plan.variables["HOROVOD_FUSION_THRESHOLD"] == "67108864"
    assert [p["batch_mult"] for p in plan.multigrid[:4]] == [8, 4, 2, 1]
    assert plan.multigrid[-1]["cycle"] == -1
    assert plan.summary()["compression"] == "fp16"


def test_aavg_options(summit):
    plan = make_plan(summit, opts(nodes=2, optimizer="adam", optimizer_sync="aavg", avg_interval=20))
    argv = list(plan.trainer_argv)
    assert argv[argv.index("--avg-interval") + 1] == "20"
    with pytest.raises(UserError, match="cannot be combined with exact accumulation"):
        make_plan(summit, opts(nodes=2, optimizer_sync="aavg", accum_steps=2, virtual_nodes=4))
    with pytest.raises(UserError, match="AAVG does not do"):
        make_plan(summit, opts(nodes=2, optimizer_sync="aavg", compression="fp16"))
    for bad in (0, -2):
        with pytest.raises(UserError, match="--avg-interval"):
            make_plan(summit, opts(nodes=2, optimizer_sync="aavg", avg_interval=bad))


def test_compression_engine_rules(summit):
    with pytest.raises(UserError, match="Horovod offers fp16 only"):
        make_plan(summit, opts(nodes=2, compression="bf16"))
    assert make_plan(summit, opts(nodes=2, compression="bf16", engine="ddp")).compression == "bf16"
    with pytest.raises(UserError, match="--fusion-threshold"):
        make_plan(summit, opts(nodes=2, fusion_threshold=-1))


def test_multigrid_needs_epochs(summit):
    with pytest.raises(UserError, match="at least 3 epochs"):
        make_plan(summit, opts(nodes=2, schedule="multigrid", epochs=2))
