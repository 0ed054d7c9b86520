#!/usr/bin/python3
"""Starts TensorFlow-style clusters the way a TensorFlow launch script does:
one process per task, each with its own TF_CONFIG and no BRAID_* identity,
and checks that braid makes them one communicator in TensorFlow's task order.

    tf_config_launch.py TF_CONFIG_CHECK [--timeout SECONDS]

Clusters (all on loopback, ports picked free here):
  chief+workers  a chief and 2 workers on 127.0.0.1: ranks chief, worker 0, 1.
  workers+ps     2 workers and a ps on "localhost", with an evaluator job and
                 the extra keys launchers write: worker 0 hosts the store.
  bad-index      one task whose index is out of range: it fails at once with
                 a message naming the problem.

Each task runs tf_config_check EXPECTED_RANK EXPECTED_SIZE, which joins with
Comm::from_env, checks its rank and size, all-reduces and splits a pair. The
tasks start in reverse rank order (the chief last). A failing task ends its
cluster at once; every process is killed after --timeout. Exits 0 when every
cluster passed, 1 otherwise.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

IDENTITY = ("BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_SIZE", "BRAID_STORE_ADDR")


def free_ports(count):
    """Ports free on 127.0.0.1 now (bound together, so all distinct, then released)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def task_env(tf_config):
    env = {k: v for k, v in os.environ.items() if k not in IDENTITY}
    env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def run_cluster(name, check, cluster, extra, timeout):
    """Starts one process per task (rank order: chief, workers, ps) and waits for all."""
    tasks = [(job, i) for job in ("chief", "worker", "ps") for i in range(len(cluster.get(job, [])))]
    size = len(tasks)
    procs = []
    try:
        for rank in reversed(range(size)):
            job, index = tasks[rank]
            config = dict(extra, cluster=cluster, task={"type": job, "index": index})
            procs.append(subprocess.Popen([check, str(rank), str(size)], env=task_env(config)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            bad = [c for c in codes if c not in (None, 0)]
            if bad:
                print(f"{name}: FAILED: a task exited with status {bad[0]}", file=sys.stderr)
                return False
            if all(c == 0 for c in codes):
                print(f"{name}: ok ({size} tasks)", flush=True)
                return True
            time.sleep(0.05)
        print(f"{name}: FAILED: the tasks did not finish within {timeout} s", file=sys.stderr)
        return False
    finally:
        stop(procs)


def run_bad_index(check, timeout):
    """A task whose index is out of range fails at once, naming it."""
    ports = free_ports(2)
    config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": 2}}
    try:
        done = subprocess.run([check, "2", "2"], env=task_env(config), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        print("bad-index: FAILED: the task did not fail in time", file=sys.stderr)
        return False
    want = 'task index 2 is out of range: job "worker" has 2 tasks'
    if done.returncode == 0 or want not in done.stderr:
        print(f"bad-index: FAILED: status {done.returncode}, stderr: {done.stderr!r}", file=sys.stderr)
        return False
    print("bad-index: ok", flush=True)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", help="the tf_config_check program")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()

    ok = True
    p = free_ports(3)
    ok &= run_cluster("chief+workers", args.check,
                      {"chief": [f"127.0.0.1:{p[0]}"], "worker": [f"127.0.0.1:{p[1]}", f"127.0.0.1:{p[2]}"]},
                      {}, args.timeout)
    p = free_ports(4)
    ok &= run_cluster("workers+ps", args.check,
                      {"worker": [f"localhost:{p[0]}", f"localhost:{p[1]}"], "ps": [f"localhost:{p[2]}"],
                       "evaluator": [f"localhost:{p[3]}"]},
                      {"environment": "cloud", "rpc_layer": "grpc"}, args.timeout)
    ok &= run_bad_index(args.check, args.timeout)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
