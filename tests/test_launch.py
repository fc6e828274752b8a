"""autogradviz.torchrun / init_distributed / report: real torchrun jobs on gloo.

torch is the oracle for what the ranks computed (all_reduce, all_gather against sums done
here). Whether a process of a job survived is read from /proc directly, by a marker the
test puts in the job's environment, independently of the launcher's own bookkeeping.
"""
from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import autogradviz as agv
from autogradviz.distributed import launch

SCRIPTS = Path(__file__).resolve().parent / "dist_scripts"
ALLREDUCE = SCRIPTS / "allreduce.py"
REPO = Path(__file__).resolve().parents[1]


def survivors(mark: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries ``AGV_TEST_MARK=<mark>``."""
    needle = f"AGV_TEST_MARK={mark}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != b"Z":
            found.append(int(entry))
    return found


def marked() -> tuple[str, dict[str, str]]:
    mark = uuid.uuid4().hex
    return mark, {"AGV_TEST_MARK": mark}


# --- input checks (no process started) ----------------------------------------------------


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"script": "no_such_script.py"}, FileNotFoundError, "no script at"),
    ({"script": "scripts/ch05_jobs.py"}, FileNotFoundError, "notebooks/ folder"),
    ({"script": str(SCRIPTS)}, ValueError, "ending in .py"),
    ({"script": 3}, TypeError, "path of a .py file"),
    ({"nproc": 0}, ValueError, "positive int"),
    ({"nproc": True}, ValueError, "positive int"),
    ({"nproc": "2"}, ValueError, "positive int"),
    ({"nproc": (os.cpu_count() or 1) * 4 + 1}, ValueError, "per CPU core"),
    ({"timeout": 0}, ValueError, "positive number of seconds"),
    ({"timeout": float("nan")}, ValueError, "positive number of seconds"),
    ({"args": "--steps 3"}, TypeError, "sequence of str"),
    ({"args": ["--steps", 3]}, TypeError, "sequence of str"),
    ({"env": {"STEPS": 3}}, TypeError, "map str to str"),
])
def test_bad_inputs_say_what_to_pass(kwargs, exc, text):
    call = {"script": ALLREDUCE, **kwargs}
    with pytest.raises(exc, match=text):
        agv.torchrun(call.pop("script"), **call)


def test_rank_helpers_need_torchrun(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="torchrun --standalone"):
        agv.init_distributed()
    with pytest.raises(RuntimeError, match="not started by torchrun"):
        agv.report({"x": 1})


@pytest.fixture
def rank_env(monkeypatch, tmp_path):
    """This process dressed as rank 1 of a torchrun job, reporting into tmp_path."""
    for var, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
                       launch.RESULTS_ENV: str(tmp_path)}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(launch, "_REPORTED", {})
    return tmp_path


def test_init_distributed_in_a_one_rank_job(monkeypatch, tmp_path):
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    with socket.socket() as s:  # a free port for the one-rank rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for var, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       launch.RESULTS_ENV: str(tmp_path)}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        agv.init_distributed(timeout_s=0)
    try:
        ctx = agv.init_distributed(timeout_s=30)
        assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.backend) == (0, 1, 0, "gloo")
        assert ctx.device == torch.device("cpu") and ctx.is_main
        assert dist.get_backend() == "gloo" and dist.get_world_size() == 1
        assert agv.init_distributed() == ctx  # a second call joins nothing new
        assert json.loads((tmp_path / "meta0.json").read_text()) == {"backend": "gloo"}
    finally:
        launch._destroy()
    assert not dist.is_initialized()


def test_report_converts_tensors_and_merges_keys(rank_env):
    agv.report({"t": torch.arange(6).view(2, 3), "dtype": torch.float16, "n": 3})
    agv.report({"nested": {"x": (torch.tensor(0.5), None)}})
    data = json.loads((rank_env / "rank1.json").read_text())
    assert data == {"t": [[0, 1, 2], [3, 4, 5]], "dtype": "torch.float16", "n": 3,
                    "nested": {"x": [0.5, None]}}
    assert not list(rank_env.glob(".*tmp"))  # the atomic write left no temporary file
    with pytest.raises(ValueError, match=r"already reported \['n'\]"):
        agv.report({"n": 4})
    with pytest.raises(TypeError, match="keys must be str"):
        agv.report({"d": {1: 2}})
    with pytest.raises(TypeError, match=r"report\['o'\] is a object"):
        agv.report({"o": object()})


def test_report_without_the_launcher_prints(rank_env, monkeypatch, capsys):
    """Under a plain `torchrun` (no results folder) a rank shows its report on stdout, so
    the same script runs with or without the notebook; the checks still apply."""
    monkeypatch.delenv(launch.RESULTS_ENV)
    agv.report({"x": 1, "v": torch.arange(3)})
    assert capsys.readouterr().out == 'rank 1 report: {"x": 1, "v": [0, 1, 2]}\n'
    agv.report({"big": list(range(5000))})
    assert capsys.readouterr().out.rstrip("\n").endswith("…")
    with pytest.raises(ValueError, match="already reported"):
        agv.report({"x": 2})
    assert not list(rank_env.iterdir())  # nothing written


def test_python_error_finds_the_last_exception():
    text = ("[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "job.py", line 7, in <module>\n'
            "[rank1]:     raise ValueError('boom')\n"
            "[rank1]: ValueError: boom\n"
            "[rank1]: second line of the message\n")
    assert launch.python_error(text) == ('ValueError: boom\nsecond line of the message\n'
                                         '  (File "job.py", line 7, in <module>)')
    assert launch.python_error("no traceback here") is None


SUMMARY = """\
E1130 06:50:09.953000 16376 api.py:1002] failed (exitcode: 3) local_rank: 1 (pid: 16382)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
job.py FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 16381)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 16382)
============================================================
"""


def test_torchrun_summary_is_read_for_the_root_cause():
    # The rank torchrun names as the root cause, not one it stopped afterwards.
    assert launch._failed_ranks(SUMMARY, {0: "RuntimeError: peer closed"}) == (1,)
    assert launch._exit_code(SUMMARY, 1) == "3" and launch._exit_code(SUMMARY, 0) == "-15"
    assert launch._failed_ranks("no summary", {2: "x", 0: "y"}) == (0, 2)
    # torch's C++ log lines after a traceback are not part of the message.
    text = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n"
            "KeyError: 'x'\n[W1130 06:50:09.9 ProcessGroup.cpp:1] Warning: not destroyed\n")
    assert launch.python_error(text) == "KeyError: 'x'\n  (File \"a.py\", line 1, in <module>)"


GLOO_LOST = ("RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
             "Connection closed by peer [127.0.0.1]:37811. This is typically caused by a "
             "remote worker crashing.\n  (File \"distributed_c10d.py\", line 5356, in barrier)")


def test_first_own_failure_is_blamed_not_the_first_exit():
    # Rank 0's lost connection came first in torchrun's summary; rank 1 raised first.
    records = {0: {"rank": 0, "time_ns": 2_000, "type": "RuntimeError", "error": GLOO_LOST},
               1: {"rank": 1, "time_ns": 1_000, "type": "ValueError",
                   "error": "ValueError: boom\n  (File \"job.py\", line 3, in <module>)"}}
    summary = SUMMARY.replace("rank      : 1 (local_rank: 1)", "rank      : 9 (local_rank: 9)")
    failed, lines = launch._blame(records, summary, {}, 2)
    assert failed == (1,)
    assert lines[0].startswith("rank 1: ValueError: boom")
    assert lines[-1].startswith("rank 0: lost its peer after rank 1 failed (RuntimeError: "
                                "Connection closed by peer")
    # Even if the lost connection were stamped earlier, it is not a failure of its own.
    records[0]["time_ns"] = 500
    assert launch._blame(records, summary, {}, 2)[0] == (1,)
    # Only lost connections: the rank that left no Python record (killed) is the cause.
    only = {0: records[0]}
    failed, lines = launch._blame(only, "no summary", {}, 2)
    assert failed == (1,) and "without a Python error" in lines[0]
    assert lines[1].startswith("rank 0: lost its peer after rank 1 failed")
    # Two ranks failing on their own: the earlier one is the cause, the other said so.
    both = {0: {"rank": 0, "time_ns": 5, "type": "KeyError", "error": "KeyError: 'x'"},
            1: {"rank": 1, "time_ns": 9, "type": "ValueError", "error": "ValueError: y"}}
    assert launch._blame(both, "", {}, 2) == ((0,), ["rank 0: KeyError: 'x'",
                                                     "rank 1: failed later: ValueError: y"])


def test_run_repr_has_no_timing():
    run = agv.DistributedRun(results=({"a": 1}, {}), returncode=1, elapsed_s=3.21, log="",
                             nproc=2, backend="gloo", failed_ranks=(1,))
    assert repr(run) == ("DistributedRun(nproc=2, backend='gloo', returncode=1, "
                         "1 rank reports, failed_ranks=[1])")
    assert not run.ok and run[0] == {"a": 1} and len(run) == 2


# --- real jobs -------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_jobs_at_once_all_reduce_and_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # like a notebook in notebooks/: the ranks still find the repo
    mark, env = marked()
    folders = []

    def mkdtemp(**kwargs):
        folders.append(Path(real_mkdtemp(**kwargs)))
        return str(folders[-1])

    real_mkdtemp = launch.tempfile.mkdtemp
    monkeypatch.setattr(launch.tempfile, "mkdtemp", mkdtemp)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: agv.torchrun(ALLREDUCE, nproc=2, env=env), range(2)))
    assert survivors(mark) == []
    inputs = [torch.arange(4.0) + 10 * r for r in range(2)]
    for run in runs:
        assert run.ok and run.backend == "gloo" and run.failed_ranks == () and run.error is None
        assert [res["rank"] for res in run.results] == [0, 1]
        for res in run.results:
            assert torch.equal(torch.tensor(res["sum"]), inputs[0] + inputs[1])
            assert torch.equal(torch.tensor(res["gathered"]), torch.stack(inputs))
            assert res["world_size"] == 2 and res["device"] == "cpu" and res["omp"] == "1"
            assert Path(res["package"]).resolve().parent == REPO / "autogradviz"
            assert Path(res["cwd"]) == tmp_path
    ports = {res["master_port"] for run in runs for res in run.results}
    assert len(ports) == 2, "the two jobs must rendezvous on different ports"
    assert len(folders) == 2 and not any(f.exists() for f in folders)


@pytest.mark.slow
def test_failing_rank_is_named_and_the_others_are_stopped():
    mark, env = marked()

    def job(opts: list[str], check: bool):
        try:
            return agv.torchrun(ALLREDUCE, nproc=2, args=opts, env=env, check=check)
        except agv.DistributedJobError as err:
            return err

    with ThreadPoolExecutor(3) as pool:
        raised, returned, silent = pool.map(job, [["--fail-rank", "1"], ["--fail-rank", "0"],
                                                  ["--silent-rank", "1"]], [True, False, True])
    assert survivors(mark) == []  # rank 0 of the first job was sleeping 30 s
    assert isinstance(raised, agv.DistributedJobError) and raised.ranks == (1,)
    message = str(raised)
    assert "rank 1 failed" in message and "ValueError: deliberate failure on rank 1" in message
    assert len(message.splitlines()) <= 8, message  # the error, not a wall of text
    assert raised.run.results[0]["rank"] == 0  # what the healthy rank reported survives

    assert isinstance(returned, agv.DistributedRun) and returned.returncode != 0
    assert returned.failed_ranks == (0,) and "deliberate failure on rank 0" in returned.error
    assert [r["rank"] for r in returned.results] == [0, 1]  # reported before the failure

    assert isinstance(silent, agv.DistributedJobError) and silent.ranks == (1,)
    assert "wrote no report" in str(silent) and silent.run.results[1] == {}
    assert silent.run.ok  # the job itself succeeded



@pytest.mark.slow
def test_timeout_kills_the_whole_job():
    mark, env = marked()
    with pytest.raises(agv.DistributedJobError, match="timed out after 6 s and was killed") as info:
        agv.torchrun(ALLREDUCE, nproc=2, args=["--sleep", "120"], timeout=6, env=env)
    assert survivors(mark) == []
    assert info.value.timed_out and info.value.run.elapsed_s < 6 + launch.KILL_GRACE_S + 2


@pytest.mark.slow
def test_rank_that_raised_is_blamed_while_its_peer_waits_in_a_collective():
    """Rank 1 raises while rank 0 sits in ``dist.barrier()``; rank 0 then fails with a
    lost connection, often before torchrun sees rank 1 exit. Five runs in a row."""
    mark, env = marked()
    for attempt in range(5):
        with pytest.raises(agv.DistributedJobError) as info:
            agv.torchrun(ALLREDUCE, nproc=2, args=["--fail-in-collective", "1"], env=env)
        err = info.value
        message = str(err)
        assert err.ranks == (1,) and err.run.failed_ranks == (1,), (attempt, message)
        assert "rank 1 failed" in message, (attempt, message)
        assert "rank 1: ValueError: deliberate failure on rank 1 while the others wait" in message
        if "rank 0:" in message:  # rank 0 raised before torchrun stopped it
            assert "rank 0: lost its peer after rank 1 failed" in message, (attempt, message)
        assert survivors(mark) == []


def test_jobs_put_this_checkout_first_on_the_path():
    """The package lies one folder below the checkout (autogradviz/distributed/): the
    root that rank processes import from is the checkout that holds this package."""
    assert (launch._REPO_ROOT / "autogradviz" / "__init__.py").is_file()
    assert Path(launch.__file__).resolve().is_relative_to(launch._REPO_ROOT)
