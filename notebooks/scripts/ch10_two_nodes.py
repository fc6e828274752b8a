"""A crash on one "node" and what the other node's agent does about it.

Run: ``python ch10_two_nodes.py --busy 3 --timeout 3`` (no torchrun: it starts two).
It launches two torchrun agents on this machine, as two nodes of one job (``--nnodes=2``, one worker
each, a static rendezvous on 127.0.0.1, ``--max-restarts=0``). Node 1's worker raises
right after both workers pass a barrier; node 0's worker keeps computing for ``--busy``
seconds, then calls ``all_reduce`` on a group whose timeout is ``--timeout`` seconds.

torchrun stops the other workers *of its own node* when one fails
(``SimpleElasticAgent._invoke_run`` in ``torch/distributed/elastic/agent/server/api.py``
calls ``_stop_workers`` on its own worker group); nothing tells node 0's agent. So node
0's worker is never stopped: it ends only when its collective fails. Over gloo's TCP
pairs the closed connection of the dead peer fails it; NCCL on many nodes may instead
wait until the watchdog's timeout. The launcher prints one JSON line: each agent's exit
code and seconds, and what node 0's worker recorded.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path


def worker(busy: float, timeout: float, out: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    short = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    dist.barrier()
    if rank == 1:
        died = {"died_at": time.monotonic()}
        out.with_name("node1.json").write_text(json.dumps(died))
        raise RuntimeError("node 1's worker fails on purpose")
    time.sleep(busy)  # "computing": a stop from torchrun would land here
    # CLOCK_MONOTONIC is one clock for all the processes of this machine
    record = {"alive_at": time.monotonic(),  # and what torchrun put in its environment
              "async_error_handling": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")}
    try:
        dist.all_reduce(torch.ones(4), group=short)
        record["all_reduce"] = "completed"
    except RuntimeError as err:
        record["all_reduce"] = "raised"
        record["error"] = str(err).split("] ")[-1][:200]
        record["ended_at"] = time.monotonic()
        out.write_text(json.dumps(record))
        raise  # as a training script would: node 0's agent then fails too
    out.write_text(json.dumps(record))


def launch(busy: float, timeout: float) -> dict:
    with socket.socket() as sock:  # a free port for the static rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="ch10-two-nodes-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    agents, logs = [], []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               f"--node-rank={node}", "--nproc-per-node=1", "--max-restarts=0",
               "--master-addr=127.0.0.1", f"--master-port={port}", __file__,
               "--worker", "--busy", str(busy), "--timeout", str(timeout),
               "--out", str(tmp / "node0.json")]
        logs.append(open(tmp / f"agent{node}.log", "wb"))
        agents.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logs[-1],
                                       stderr=subprocess.STDOUT, env=env))
    ended = [None, None]  # each agent's exit, on the monotonic clock
    while None in ended:
        for node, agent in enumerate(agents):
            if ended[node] is None and agent.poll() is not None:
                ended[node] = time.monotonic()
        time.sleep(0.05)
    for log in logs:
        log.close()
    node0, node1 = (json.loads(path.read_text()) if path.exists() else None
                    for path in (tmp / "node0.json", tmp / "node1.json"))
    return {"agent_exit": [agent.returncode for agent in agents],
            "agent_ended_at": ended, "node0_worker": node0,
            "node1_worker_died_at": node1 and node1["died_at"],
            "node1_log_says_failed": "node 1's worker fails on purpose"
            in (tmp / "agent1.log").read_text(errors="replace")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--busy", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args.busy, args.timeout, args.out)
    else:
        print(json.dumps(launch(args.busy, args.timeout)))


if __name__ == "__main__":
    main()
