"""Run a real multi-process job from a notebook, and read back what each rank reported.

In the notebook::

    run = agv.torchrun("allreduce.py", nproc=2)     # torchrun --standalone, gloo on a CPU
    run.results[1]["sum"]                            # what rank 1 passed to report()

In the rank script::

    from autogradviz import init_distributed, report
    ctx = init_distributed()                         # DistributedContext(rank, world_size, ...)
    report({"sum": t})                               # tensors become nested lists

`torchrun` starts ``python -m torch.distributed.run --standalone`` in a session of its
own (the rendezvous binds port 0, so two jobs never share a port), hands the ranks a
fresh folder in ``AUTOGRADVIZ_RESULTS``, and reads ``rank<r>.json`` back into a
`DistributedRun`. Whatever happens (success, a failing rank, a timeout) no process of
the job outlives the call: torchrun starts every worker in a session of its own, so the
job's processes are found by the results folder in their environment (``/proc``, Linux)
as well as by torchrun's process group, and are stopped with SIGTERM, then SIGKILL.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import DistributedRun

__all__ = ["DistributedContext", "DistributedJobError", "DistributedRun", "RESULTS_ENV",
           "init_distributed", "report", "torchrun"]

#: The environment variable naming the folder each rank writes ``rank<r>.json`` into.
RESULTS_ENV = "AUTOGRADVIZ_RESULTS"
#: Seconds between SIGTERM and SIGKILL when a job is stopped.
KILL_GRACE_S = 3.0
_ERROR_LINES = 6  # lines of a rank's Python error quoted in DistributedJobError
_LOG_TAIL = 15  # lines of torchrun's output quoted when no rank's error can be found
_REPO_ROOT = Path(__file__).resolve().parents[2]  # autogradviz/distributed/launch.py


class DistributedJobError(RuntimeError):
    """A `torchrun` job failed or timed out. ``run`` holds what the job left (its log,
    the reports that exist), ``ranks`` the ranks that failed first, ``timed_out``
    whether the launcher stopped it."""

    def __init__(self, message: str, run: DistributedRun | None = None,
                 ranks: tuple[int, ...] = (), timed_out: bool = False) -> None:
        super().__init__(message)
        self.run = run
        self.ranks = ranks
        self.timed_out = timed_out


# --- launcher (runs in the notebook) ---------------------------------------------------


def _check_inputs(script: Any, nproc: Any, args: Any, timeout: Any, env: Any) -> Path:
    if not isinstance(script, (str, os.PathLike)):
        raise TypeError(f"script must be the path of a .py file (str or Path), "
                        f"got {type(script).__name__}")
    path = Path(script).resolve()
    if path.suffix != ".py":
        raise ValueError(f"script must be a Python file ending in .py, got {os.fspath(script)!r}")
    if not path.is_file():
        # A chapter downloaded from the site arrives without notebooks/scripts/: say where it is.
        chapter = ("; the book's chapters run from the repository's notebooks/ folder, which "
                   "holds their job scripts in scripts/ (open them with `make lab`)"
                   if not Path(script).is_absolute() else "")
        raise FileNotFoundError(f"no script at {os.fspath(script)!r} (relative paths start in "
                                f"{os.getcwd()!r}); pass the path of an existing .py file{chapter}")
    limit = (os.cpu_count() or 1) * 4
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive int (processes to start), got {nproc!r}")
    if nproc > limit:
        raise ValueError(f"nproc={nproc} is more than 4 processes per CPU core "
                         f"(os.cpu_count()={os.cpu_count()}); pass nproc <= {limit}")
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout) or timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or not all(
            isinstance(a, str) for a in args):
        raise TypeError(f"args must be a sequence of str, e.g. args=['--steps', '3'], "
                        f"got {args!r}")
    if env is not None and (not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise TypeError(f"env must map str to str, e.g. env={{'STEPS': '3'}}, got {env!r}")
    return path


def _job_env(results: Path, env: Mapping[str, str] | None) -> dict[str, str]:
    full = {**os.environ, **(env or {})}
    full.setdefault("OMP_NUM_THREADS", "1")  # torchrun would set it too, with a banner
    full.setdefault("PYTHONUNBUFFERED", "1")  # a killed rank's last prints reach the log
    # The ranks import this very autogradviz, even from a notebook whose cwd is notebooks/.
    paths = [str(_REPO_ROOT)] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p]
    full["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    full[RESULTS_ENV] = str(results)
    return full


def _job_pids(marker: bytes, pgid: int) -> set[int]:
    """Live processes of one job: in torchrun's process group, or carrying the job's
    results folder in their environment (workers run in sessions of their own, and
    outlive torchrun if it is killed). Zombies have no environment and are skipped."""
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: only the process group can be found
        return found
    me = os.getpid()
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read():
                    found.add(pid)
                    continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] != b"Z" and int(fields[2]) == pgid:
                found.add(pid)
        except (OSError, IndexError, ValueError):  # gone, or not ours to read
            continue
    return found


def _signal_all(pids: set[int], pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _stop_job(proc: subprocess.Popen, marker: bytes) -> None:
    """SIGTERM every process of the job (torchrun forwards it to its workers), wait up to
    `KILL_GRACE_S`, SIGKILL what is left, and reap torchrun."""
    pgid = proc.pid  # start_new_session=True: torchrun leads its own group
    pids = _job_pids(marker, pgid)
    if proc.poll() is None or pids:
        _signal_all(pids, pgid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            proc.poll()
            pids = _job_pids(marker, pgid)
            if proc.returncode is not None and not pids:
                break
            time.sleep(0.05)
        for _ in range(50):  # SIGKILL cannot be ignored; a few rounds catch late forks
            pids = _job_pids(marker, pgid)
            if proc.poll() is not None and not pids:
                break
            _signal_all(pids, pgid, signal.SIGKILL)
            time.sleep(0.02)
    proc.wait()


_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
# A line that torch's C++ logging (glog: "W1130 06:50:09.85 ...", "[W1130 ...]") wrote after
# the traceback: not part of the exception's message.
_LOG_LINE = re.compile(r"^\[?[WEIF]\d{4} \d\d:\d\d:")


def python_error(text: str, max_lines: int = _ERROR_LINES) -> str | None:
    """The exception of the last Python traceback in ``text``: its ``Type: message``
    lines (at most `max_lines`) and the frame that raised it, or None."""
    lines = [_RANK_PREFIX.sub("", ln.rstrip()) for ln in text.splitlines()]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call")]
    if not starts:
        return None
    frame, message = None, []
    for ln in lines[starts[-1] + 1:]:
        if not message and ln.startswith("  "):
            if ln.lstrip().startswith("File "):
                frame = ln.strip()
            continue
        if not ln.strip() or ln.startswith("Traceback") or _LOG_LINE.match(ln):
            if message:
                break
            continue
        message.append(ln)
    if not message:
        return None
    text = "\n".join(message[:max_lines]) + ("\n..." if len(message) > max_lines else "")
    return f"{text}\n  ({frame})" if frame else text


def _rank_errors(log_dir: Path) -> dict[int, str]:
    """Local rank -> the Python error in its stderr.log (torchrun's --log-dir layout:
    ``<log_dir>/<run>/attempt_<n>/<local rank>/stderr.log``), last attempt wins."""
    errors: dict[int, str] = {}
    for path in sorted(log_dir.glob("*/attempt_*/*/stderr.log")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        # A rank that exited without a traceback (sys.exit(1), a crash): its last words.
        err = python_error(text) or _tail(text, 3)
        if err and path.parent.name.isdigit():
            errors[int(path.parent.name)] = err
    return errors


_ROOT_CAUSE = re.compile(r"Root Cause.*?\n=+", re.S)
_RANK_FIELD = re.compile(r"rank\s*:\s*(\d+)")


def _failed_ranks(log: str, errors: dict[int, str]) -> tuple[int, ...]:
    """The ranks torchrun names as the root cause; else the ranks with a Python error."""
    found = _ROOT_CAUSE.search(log)
    if found:
        ranks = tuple(sorted({int(r) for r in _RANK_FIELD.findall(found.group(0))}))
        if ranks:
            return ranks
    return tuple(sorted(errors))


# What a rank raises when a peer it was talking to went away: gloo's "Connection closed
# by peer", a reset or broken socket, NCCL's aborted communicator, torch's network and
# backend errors from a collective. Such a rank failed because another one did.
_PEER_LOST = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Connection refused|ECONNRESET|EPIPE|"
    r"remote process exited|communicator was aborted|NCCL Error \d+: remote|"
    r"peer .* (closed|crashed)", re.I)


def _lost_peer(kind: str, error: str) -> bool:
    """Whether a rank's error says it lost a peer rather than failing on its own."""
    return kind in ("DistNetworkError",) or bool(_PEER_LOST.search(error))


def _error_records(folder: Path) -> dict[int, dict[str, Any]]:
    """Rank -> the ``error<r>.json`` its exception hook wrote (see `_record_failures`)."""
    records = {}
    for path in folder.glob("error*.json"):
        try:
            rec = json.loads(path.read_text())
            records[int(rec["rank"])] = rec
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return records


def _blame(records: dict[int, dict[str, Any]], log: str, errors: dict[int, str],
           nproc: int) -> tuple[tuple[int, ...], list[str]]:
    """The rank(s) that failed first and one line (or a few) per failed rank.

    With the ranks' own records: the earliest exception that is not a lost connection is
    the root cause; a rank that only lost its peer is said to have done so. When every
    record is a lost connection, the cause left no Python record (killed, crashed): the
    rank torchrun names, else the ranks with no record. Without records: torchrun's
    summary, else every rank with a Python error."""
    if not records:
        failed = _failed_ranks(log, errors)
        return failed, [f"rank {r}: {errors[r]}" if r in errors else
                        f"rank {r}: exited with code {_exit_code(log, r)}, printing nothing "
                        "to stderr" for r in failed]
    order = sorted(records, key=lambda r: records[r]["time_ns"])
    own = [r for r in order if not _lost_peer(records[r]["type"], records[r]["error"])]
    if own:
        root: tuple[int, ...] = (own[0],)
    else:
        silent = tuple(r for r in _failed_ranks(log, {}) if r not in records) or tuple(
            r for r in range(nproc) if r not in records)
        root = silent or (order[0],)
    lines = []
    for r in root:
        if r in records:
            lines.append(f"rank {r}: {records[r]['error']}")
        else:
            lines.append(f"rank {r}: exited with code {_exit_code(log, r)} without a Python "
                         "error (killed or crashed)")
    cause = ", ".join(map(str, root))
    for r in order:
        if r in root:
            continue
        first = records[r]["error"].splitlines()[0]
        if _lost_peer(records[r]["type"], records[r]["error"]):
            lines.append(f"rank {r}: lost its peer after rank {cause} failed ({_short(first)})")
        else:
            lines.append(f"rank {r}: failed later: {_short(first)}")
    return root, lines


_SOURCE_PREFIX = re.compile(r"\[[^\]\s]*\.(cc|cpp|h):\d+\]\s*")


def _short(line: str, width: int = 100) -> str:
    """One line of an error, without the C++ source location gloo and c10 put first."""
    line = _SOURCE_PREFIX.sub("", line, count=1)
    return line if len(line) <= width else line[: width - 1] + "…"


def _exit_code(log: str, rank: int) -> str:
    """The exit code torchrun's failure summary gives for ``rank`` ("?" if absent)."""
    found = re.search(rf"^\s*rank\s*:\s*{rank}\b[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", log,
                      re.M)
    return found.group(1) if found else "?"


def _read_results(folder: Path, nproc: int) -> tuple[tuple[dict, ...], list[int]]:
    results: list[dict] = []
    missing: list[int] = []
    for r in range(nproc):
        path = folder / f"rank{r}.json"
        try:
            results.append(json.loads(path.read_text()))
        except FileNotFoundError:
            results.append({})
            missing.append(r)
    return tuple(results), missing


def _backend(folder: Path) -> str | None:
    try:
        return json.loads((folder / "meta0.json").read_text()).get("backend")
    except (OSError, ValueError):
        return None


def _tail(text: str, n: int = _LOG_TAIL) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:])


def torchrun(script: str | os.PathLike, *, nproc: int = 2, args: Sequence[str] = (),
             timeout: float = 120.0, env: Mapping[str, str] | None = None,
             check: bool = True) -> DistributedRun:
    """Run ``script`` on ``nproc`` processes with ``torchrun --standalone``; return what
    each rank passed to `report`, as a `DistributedRun`.

    The command is ``sys.executable -m torch.distributed.run --standalone
    --nproc_per_node=<nproc> <script> <args>``, with ``os.environ`` plus ``env``,
    ``OMP_NUM_THREADS=1`` and ``PYTHONUNBUFFERED=1`` unless set, this package's folder first
    on ``PYTHONPATH`` and ``AUTOGRADVIZ_RESULTS`` set to a fresh folder, removed afterwards.

    Raises `DistributedJobError` when the job runs past ``timeout`` seconds (always: it is
    killed) or, with ``check=True``, when it exits non-zero (the message names the rank
    that failed first and its Python error, and each rank that only lost its peer
    afterwards as such) or a rank did not report. "First" is read from the time each
    rank's exception happened, recorded by the hook `init_distributed` installs, not
    from the order the processes exited: a rank waiting in a collective often exits
    first, failing on the connection its peer closed. Without those records (a script
    that does not call `init_distributed`), torchrun's root-cause summary decides. With
    ``check=False`` a failed job is returned: ``returncode``, ``failed_ranks``, ``error``,
    and ``{}`` for every rank that did not report. No process of the job survives the call.
    """
    path = _check_inputs(script, nproc, args, timeout, env)
    tmp = Path(tempfile.mkdtemp(prefix="autogradviz-run-"))
    results, logs = tmp / "results", tmp / "logs"
    results.mkdir()
    logs.mkdir()
    marker = f"{RESULTS_ENV}={results}\0".encode()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", f"--log-dir={logs}", "--tee=3",
           str(path), *args]
    timed_out = False
    before_kill = ""
    start = time.perf_counter()
    try:
        # The log goes to a file, not a pipe: a pipe could be held open by a stray rank.
        with open(tmp / "console.log", "wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=_job_env(results, env),
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                # What the ranks printed, before the stop adds torchrun's own traceback.
                before_kill = (tmp / "console.log").read_text(errors="replace")
            except BaseException:  # KeyboardInterrupt in a notebook: stop the job too
                _stop_job(proc, marker)
                raise
            _stop_job(proc, marker)  # stragglers, even after a clean exit
        elapsed = time.perf_counter() - start
        log = (tmp / "console.log").read_text(errors="replace")
        reports, missing = _read_results(results, nproc)
        errors = _rank_errors(logs)
        failed: tuple[int, ...] = ()
        error = None
        if proc.returncode != 0 and not timed_out:
            failed, quoted = _blame(_error_records(results), log, errors, nproc)
            error = "\n".join(quoted) if quoted else _tail(log)
        run = DistributedRun(results=reports, returncode=proc.returncode, elapsed_s=elapsed,
                             log=log, nproc=nproc, backend=_backend(results),
                             failed_ranks=failed, error=error)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    name = path.name
    if timed_out:
        raise DistributedJobError(
            f"{name} timed out after {timeout:g} s and was killed (every process of the job); "
            f"a rank may be waiting in a collective that another rank never called. "
            f"Last output:\n{_tail(before_kill, 8) or '(none)'}", run, timed_out=True)
    if check and run.returncode != 0:
        who = (f"rank {failed[0]} failed" if len(failed) == 1 else
               f"ranks {', '.join(map(str, failed))} failed" if failed else "the job failed")
        raise DistributedJobError(
            f"{name}: {who} (torchrun exit code {run.returncode}); the other ranks were "
            f"stopped.\n{error}", run, ranks=failed)
    if check and missing:
        raise DistributedJobError(
            f"{name} exited cleanly but rank(s) {missing} wrote no report; call "
            f"autogradviz.report({{...}}) in every rank, or pass check=False", run,
            ranks=tuple(missing))
    return run


# --- rank side (runs inside each torchrun worker) ---------------------------------------


@dataclass(frozen=True)
class DistributedContext:
    """Where this rank runs: what `init_distributed` returns."""

    rank: int
    world_size: int
    local_rank: int
    device: Any  # torch.device: cuda:<local_rank> with nccl, cpu with gloo
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _launched_rank() -> int:
    missing = [v for v in _TORCHRUN_VARS if v not in os.environ]
    if missing:
        raise RuntimeError(
            f"this process was not started by torchrun (no {', '.join(missing)} in the "
            "environment); run the script with autogradviz.torchrun('script.py', nproc=2) "
            "or `torchrun --standalone --nproc_per_node=2 script.py`")
    return int(os.environ["RANK"])


def init_distributed(timeout_s: float | None = None) -> DistributedContext:
    """Join the job torchrun started: ``nccl`` on ``cuda:<local_rank>`` when there is a
    GPU for every rank, else ``gloo`` on the CPU. ``timeout_s`` bounds every collective
    (``init_process_group(timeout=...)``). The group is destroyed at exit. Called again,
    it returns the same context. An uncaught exception in this rank is recorded with its
    time, so `torchrun` can tell the rank that failed first from ranks that only lost it."""
    import datetime

    import torch
    import torch.distributed as dist

    rank = _launched_rank()
    world, local = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(
            timeout_s, (int, float)) or not timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds or None, "
                         f"got {timeout_s!r}")
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        backend, device = "nccl", torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
    if dist.is_initialized():
        backend = str(dist.get_backend())
    else:
        kwargs: dict[str, Any] = {"backend": backend}
        if timeout_s is not None:
            kwargs["timeout"] = datetime.timedelta(seconds=float(timeout_s))
        dist.init_process_group(**kwargs)
        atexit.register(_destroy)
    folder = os.environ.get(RESULTS_ENV)
    if folder:
        _write_json(Path(folder) / f"meta{rank}.json", {"backend": backend})
    _record_failures(rank)
    return DistributedContext(rank, world, local, device, backend)


def _record_failures(rank: int) -> None:
    """Make this rank's uncaught exception leave a record of when it happened.

    torchrun's own record of which rank failed first compares whole seconds (its error
    file's timestamp, else the second its agent noticed), so a rank that raised and a
    peer that failed a few milliseconds later in a collective tie, and the summary names
    whichever comes first in its table. So the hook writes ``error<r>.json`` (the time in
    nanoseconds, the exception) into the results folder for `torchrun` to order, and,
    for an exception that is not a lost connection, torch's error file
    (``TORCHELASTIC_ERROR_FILE``, what ``@record`` writes), so that a plain torchrun's
    summary quotes it. Installed once; the previous hook still runs."""
    previous = sys.excepthook
    if getattr(previous, "_autogradviz_rank", None) is not None:
        return

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            when = time.time_ns()
            text = "".join(traceback.format_exception(kind, value, tb))
            error = python_error(text) or f"{kind.__name__}: {value}"
            folder = os.environ.get(RESULTS_ENV)
            if folder:
                _write_json(Path(folder) / f"error{rank}.json",
                            {"rank": rank, "time_ns": when, "type": kind.__name__,
                             "error": error})
            if os.environ.get("TORCHELASTIC_ERROR_FILE") and not _lost_peer(
                    kind.__name__, error):
                from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

                ErrorHandler().record_exception(value)
        except Exception:  # noqa: BLE001 - the record is a courtesy; the traceback matters
            pass
        previous(kind, value, tb)

    hook._autogradviz_rank = rank  # type: ignore[attr-defined]
    sys.excepthook = hook


def _destroy() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


_REPORTED: dict[str, Any] = {}
#: Characters of a report printed by a rank run without `autogradviz.torchrun`.
_PRINTED_REPORT = 2000


def _plain(value: Any, where: str) -> Any:
    """``value`` as JSON-able Python: tensors as nested lists, dtypes and devices as str."""
    torch = sys.modules.get("torch")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if torch is not None:
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().tolist()
        if isinstance(value, (torch.dtype, torch.device)):
            return str(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"report() keys must be str; {where} has key {k!r}")
            out[k] = _plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    raise TypeError(f"report() takes JSON-able values and tensors; {where} is a "
                    f"{type(value).__name__}")


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # atomic: the launcher never reads half a file


def report(data: Mapping[str, Any]) -> None:
    """Hand ``data`` (a dict of JSON-able values; tensors become nested lists) back to
    the notebook as this rank's entry of `DistributedRun.results`.

    Several calls merge their keys into one report; reporting a key twice is an error.
    The file ``rank<r>.json`` is rewritten atomically on every call. Under a plain
    ``torchrun`` (no results folder), each rank prints its report on one line instead, so
    a chapter's script runs unchanged with or without the notebook.
    """
    rank = _launched_rank()
    if not isinstance(data, Mapping):
        raise TypeError(f"report() takes a dict, got {type(data).__name__}")
    plain = _plain(data, "report")
    twice = sorted(set(plain) & set(_REPORTED))
    if twice:
        raise ValueError(f"rank {rank} already reported {twice}; report each key once")
    _REPORTED.update(plain)
    folder = os.environ.get(RESULTS_ENV)
    if not folder:  # a plain `torchrun` with no notebook listening: show it instead
        print(f"rank {rank} report: {_shorten(json.dumps(plain))}", flush=True)
        return
    _write_json(Path(folder) / f"rank{rank}.json", _REPORTED)


def _shorten(text: str, width: int = _PRINTED_REPORT) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
