#!/usr/bin/python3
"""Elastic jobs go on without a lost rank and take it back: start ranks of
elastic_worker (BRAID_ELASTIC=1), take one away, check that the others go on
with correct sums, start a process that joins the running job, and check that
every process ends the same iterations in a communicator of the full size.

    elastic_matrix.py --worker PATH --case NAME [--transport T] [--keep-logs]

Cases (each its own Meson test, suite 'elastic'):
  kill9    kill -9 rank 2 of 4: ranks 0, 1, 3 go on as 3 ranks within
           BRAID_TIMEOUT; a new process joins and all end as 4 ranks.
  twice    kill9, then kill -9 the process that rejoined, and rejoin again.
  stall    SIGSTOP rank 1 of 4: the others time out, go on as 3; on SIGCONT
           the stopped one learns it came too late and joins again, and all
           end as 4 ranks.
  chief    kill -9 rank 0 of 4 while braid-run --elastic hosts the store: rank
           1 becomes the chief and says so; a new process joins; all end as 4.
  store    the store's host leaves: three braid-runs --elastic host the
           stores of a --master list, one each, beside ranks 0, 1, 2; kill -9
           of node 0 (its braid-run, the job's store, and rank 0): ranks 1
           and 2 move to node 1's standby store and go on; rank 0's command,
           run again beside a new braid-run, finds the job there and joins;
           then nodes 0 and 1 go together, and rank 2, one of three at node
           2's store, stops saying it is fewer than half rather than go on
           as a second job.

Every process is hard-killed after a bound. Traffic goes only to loopback.
Exits 0 (pass), 1 (fail) or 77 (skip).
"""

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_matrix import CaseFailed, Job, Rank, free_port, tail  # noqa: E402

TIMEOUT_S = 4


def elastic_env(job, rank, size, store):
    extra = {"BRAID_ELASTIC": "1", "BRAID_ELASTIC_GRACE": "1s"}
    if os.environ.get("BRAID_DEBUG"):
        extra["BRAID_DEBUG"] = os.environ["BRAID_DEBUG"]
    return job.env(rank, size, store, f"{TIMEOUT_S}s", extra)


def count_lines(p, pattern):
    return len(re.findall(pattern, p.stdout(), re.M))


def wait_for_line(procs, pattern, bound_s, what, before=None):
    """Waits until every process in procs printed one more line matching pattern than it had in before
    (a dict of counts; none: one line); fails early on an exit."""
    end = time.monotonic() + bound_s
    regex = re.compile(pattern, re.M)
    need = {p: (before or {}).get(p, 0) + 1 for p in procs}
    while time.monotonic() < end:
        if all(len(regex.findall(p.stdout())) >= need[p] for p in procs):
            return time.monotonic()
        for p in procs:
            if p.done and len(regex.findall(p.stdout())) < need[p]:
                raise CaseFailed(f"{what}: process {p.rank} exited ({p.proc.returncode}) before printing "
                                 f"/{pattern}/:\n" + "\n".join(tail(q) for q in procs))
        time.sleep(0.01)
    raise CaseFailed(f"{what}: not every process printed /{pattern}/ within {bound_s} s:\n" +
                     "\n".join(tail(p) for p in procs))


def check_done(job, procs, size, iters, bound_s):
    job.wait_all(procs, bound_s)
    problems = []
    for p in procs:
        out = p.stdout()
        if p.proc.returncode != 0:
            problems.append(f"process {p.rank} ended with exit {p.proc.returncode}")
        if "WRONG" in out:
            problems.append(f"process {p.rank} saw a wrong sum: " +
                            next(line for line in out.splitlines() if "WRONG" in line))
        if not re.search(rf"^done rank \d+ size {size} iters {iters}$", out, re.M):
            problems.append(f"process {p.rank} did not end as one of {size} ranks: {out.splitlines()[-1:]}")
    ranks = sorted(int(m.group(1)) for p in procs for m in [re.search(r"^done rank (\d+)", p.stdout(), re.M)] if m)
    if ranks != list(range(size)):
        problems.append(f"the final ranks are {ranks}, not 0..{size - 1}")
    if problems:
        raise CaseFailed("\n  ".join(problems) + "\n" + "\n".join(tail(p) for p in job.ranks))


def start_job(job, n, iters, extra=()):
    store = f"127.0.0.1:{free_port()}"
    args = ["--iters", str(iters), *extra]
    procs = [job.start(r, args, elastic_env(job, r, n, store)) for r in range(n)]
    wait_for_line(procs, r"^running rank", 20, "start")
    return store, args, procs


def join(job, label, store, args):
    env = elastic_env(job, 0, 1, store)
    env["BRAID_TIMEOUT"] = "30s"  # waits to be admitted while the members may still be recovering
    for name in ("BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_SIZE"):
        env.pop(name)
    return job.start(label, ["--join", *args], env)


def kill_and_rejoin(job, procs, victim, store, args, label):
    shrunk, grown = r"^shrunk rank", r"^grown rank"
    before = {p: (count_lines(p, shrunk), count_lines(p, grown)) for p in procs}
    os.kill(victim.pid, signal.SIGKILL)
    victim.killed_by_us = True
    t0 = time.monotonic()
    survivors = [p for p in procs if p is not victim]
    n = len(procs)
    took = wait_for_line(survivors, rf"^shrunk rank \d+ size {n - 1} at", TIMEOUT_S + 8, "shrink",
                         {p: before[p][0] for p in survivors}) - t0
    newcomer = join(job, label, store, args)
    t1 = time.monotonic()
    wait_for_line(survivors + [newcomer], rf"^grown rank \d+ size {n} at", TIMEOUT_S + 10, "rejoin",
                  {p: before[p][1] for p in survivors})
    return survivors + [newcomer], took, time.monotonic() - t1


def case_kill9(job, twice=False):
    n, iters = 4, 600
    store, args, procs = start_job(job, n, iters)
    procs, shrink_s, rejoin_s = kill_and_rejoin(job, procs, procs[2], store, args, 4)
    summary = f"kill -9 rank 2 of {n}: 3 went on in {shrink_s:.2f} s, the new process rejoined in {rejoin_s:.2f} s"
    if twice:
        procs, shrink_s, rejoin_s = kill_and_rejoin(job, procs, procs[-1], store, args, 5)
        summary += f"; kill -9 of it: went on in {shrink_s:.2f} s, rejoined again in {rejoin_s:.2f} s"
    check_done(job, procs, n, iters, 60)
    return summary + f"; all {n} ended {iters} iterations with correct sums"


def case_stall(job):
    n, iters = 4, 600
    store, args, procs = start_job(job, n, iters)
    stalled = procs[1]
    os.kill(stalled.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    others = [p for p in procs if p is not stalled]
    took = wait_for_line(others, rf"^shrunk rank \d+ size {n - 1} at", TIMEOUT_S + 8, "shrink") - t0
    os.kill(stalled.pid, signal.SIGCONT)
    t1 = time.monotonic()
    rejoined = wait_for_line(procs, rf"^grown rank \d+ size {n} at", TIMEOUT_S + 15, "rejoin") - t1
    if "late:" not in stalled.stdout():
        raise CaseFailed("the stopped process rejoined without being told it came late:\n" + tail(stalled))
    check_done(job, procs, n, iters, 60)
    return (f"SIGSTOP rank 1 of {n}: 3 went on in {took:.2f} s (timeout {TIMEOUT_S} s); after SIGCONT it came "
            f"late, joined again and was admitted in {rejoined:.2f} s; all {n} ended with correct sums")


class LaunchedRank:
    """One rank's lines in braid-run's output ("[r] ...")."""

    def __init__(self, launcher, index):
        self.launcher, self.rank, self.prefix = launcher, index, f"[{index}] "
        self.proc = launcher.proc

    def _lines(self, text):
        return "\n".join(line[len(self.prefix):] for line in text.splitlines() if line.startswith(self.prefix))

    def stdout(self):
        return self._lines(self.launcher.stdout())

    def stderr(self):
        return self._lines(self.launcher.stderr())

    @property
    def done(self):
        return False


def case_chief(job, braid_run):
    n, iters, port = 4, 600, free_port()
    store = f"127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAID_")}
    env.update({"BRAID_TIMEOUT": f"{TIMEOUT_S}s", "BRAID_ELASTIC_GRACE": "1s", "BRAID_SOCKET_IFNAME": "lo",
                "BRAID_JOB_ID": f"elastic-chief-{os.getpid()}"})
    if job.transport:
        env["BRAID_TRANSPORT"] = job.transport
    launcher = Rank("run", [braid_run, "-n", str(n), "--elastic", "--port", str(port), "--", job.worker,
                            "--iters", str(iters)], env, job.logdir)
    job.ranks.append(launcher)
    views = [LaunchedRank(launcher, r) for r in range(n)]
    wait_for_line(views, r"^running rank", 20, "start")
    chief_pid = int(re.search(r"^running rank 0 size \d+ pid (\d+)", views[0].stdout(), re.M).group(1))
    os.kill(chief_pid, signal.SIGKILL)
    t0 = time.monotonic()
    survivors = views[1:]
    took = wait_for_line(survivors, rf"^shrunk rank \d+ size {n - 1} at", TIMEOUT_S + 8, "shrink") - t0
    if not re.search(r"rank 1 is rank 0 \(the chief\) now", views[1].stderr()):
        raise CaseFailed("no survivor said that rank 1 is the chief now:\n" + tail(views[1]))
    # The chief's command again: it finds the job running and joins it.
    newcomer_env = dict(env, BRAID_RANK="0", BRAID_WORLD_SIZE=str(n), BRAID_LOCAL_RANK="0", BRAID_LOCAL_SIZE=str(n),
                        BRAID_STORE_ADDR=store, BRAID_ELASTIC="1", BRAID_STORE_EXTERNAL="1", BRAID_TIMEOUT="30s")
    newcomer = job.start("new", ["--iters", str(iters)], newcomer_env)
    t1 = time.monotonic()
    wait_for_line(survivors + [newcomer], rf"^grown rank \d+ size {n} at", TIMEOUT_S + 10, "rejoin")
    rejoin_s = time.monotonic() - t1
    job.wait_all([launcher, newcomer], 60)
    problems = []
    if launcher.proc.returncode != 0:
        problems.append(f"braid-run ended with exit {launcher.proc.returncode}")
    if newcomer.proc.returncode != 0:
        problems.append(f"the restarted chief ended with exit {newcomer.proc.returncode}")
    done = sorted(int(m.group(1)) for p in survivors + [newcomer]
                  for m in [re.search(rf"^done rank (\d+) size {n} iters {iters}$", p.stdout(), re.M)] if m)
    if done != list(range(n)):
        problems.append(f"the processes ended as ranks {done}, not 0..{n - 1} of {n}")
    if any("WRONG" in p.stdout() for p in survivors + [newcomer]):
        problems.append("a wrong sum")
    if problems:
        raise CaseFailed("\n  ".join(problems) + "\n" + "\n".join(tail(p) for p in survivors + [newcomer]))
    return (f"kill -9 of the chief (rank 0 of {n}) under braid-run --elastic: the store lived on in braid-run, "
            f"3 went on in {took:.2f} s with rank 1 as the chief; the chief's command, run again, joined in "
            f"{rejoin_s:.2f} s; all {n} ended {iters} iterations with correct sums")


def case_store(job, braid_run):
    """Three "nodes" on loopback: node k is a braid-run --elastic hosting the k-th store of a --master list
    (running only a sleep) and rank k, started here with that braid-run's environment for the store (on
    one host, so that loopback addresses pass)."""
    n, iters = 3, 100000  # ends by the minority's stop, not by its iterations
    stores = [f"127.0.0.1:{free_port()}" for _ in range(n)]
    base = {k: v for k, v in os.environ.items() if not k.startswith("BRAID_")}
    base.update({"BRAID_TIMEOUT": f"{TIMEOUT_S}s", "BRAID_ELASTIC_GRACE": "1s", "BRAID_SOCKET_IFNAME": "lo",
                 "BRAID_JOB_ID": f"elastic-store-{os.getpid()}"})
    if job.transport:
        base["BRAID_TRANSPORT"] = job.transport

    def store_host(k, label):
        launcher = Rank(label, [braid_run, "-n", "1", "--nnodes", str(n), "--node-rank", str(k), "--master",
                                ",".join(stores), "--elastic", "--", "sleep", "600"], base, job.logdir)
        job.ranks.append(launcher)
        end = time.monotonic() + 20
        while f"store runs in this braid-run at {stores[k]}" not in launcher.stderr():
            if launcher.done or time.monotonic() > end:
                raise CaseFailed(f"braid-run {label} did not host the store at {stores[k]}:\n" + tail(launcher))
            time.sleep(0.02)
        return launcher

    def rank(k, label):
        env = dict(base, BRAID_RANK=str(k), BRAID_WORLD_SIZE=str(n), BRAID_STORE_ADDR=stores[0],
                   BRAID_STORE_STANDBY=",".join(stores[1:]), BRAID_ELASTIC="1", BRAID_STORE_EXTERNAL="1")
        return job.start(label, ["--iters", str(iters), "--grow-every", "5", "--sleep-ms", "1"], env)

    hosts = [store_host(k, f"store{k}") for k in range(n)]
    procs = [rank(k, k) for k in range(n)]
    wait_for_line(procs, r"^running rank", 20, "start")
    for p in (hosts[0], procs[0]):  # node 0's machine: the job's store and rank 0
        p.hard_kill()
        p.killed_by_us = True
    t0 = time.monotonic()
    survivors = procs[1:]
    took = wait_for_line(survivors, rf"^shrunk rank \d+ size {n - 1} at", TIMEOUT_S + 8, "shrink") - t0
    for p in survivors:
        if f"going on with the standby store at {stores[1]}" not in p.stderr():
            raise CaseFailed(f"rank {p.rank} did not say that it moved to the store at {stores[1]}:\n" + tail(p))
    # Node 0 again: its braid-run hosts a fresh store, where the job is not;
    # rank 0's command finds the job at node 1's store and joins it.
    hosts[0] = store_host(0, "store0-again")
    back = rank(0, "0-again")
    t1 = time.monotonic()
    wait_for_line(survivors + [back], rf"^grown rank \d+ size {n} at", TIMEOUT_S + 10, "rejoin")
    rejoin_s = time.monotonic() - t1
    if f"the elastic job at {stores[1]} runs already" not in back.stderr():
        raise CaseFailed("the restarted rank did not say it found the job at the standby store:\n" + tail(back))
    # Nodes 0 and 1 go together: the last rank is one of three.
    for p in (hosts[0], back, hosts[1], procs[1]):
        p.hard_kill()
        p.killed_by_us = True
    alone = procs[2]
    job.wait_all([alone], TIMEOUT_S + 20)
    if f"going on with the standby store at {stores[2]}" not in alone.stderr():
        raise CaseFailed(f"rank 2 did not say that it moved on to the store at {stores[2]}:\n" + tail(alone))
    if "fewer than half" not in alone.stderr() or alone.proc.returncode == 0:
        raise CaseFailed(f"rank 2, alone of {n}, did not stop saying it is fewer than half (exit "
                         f"{alone.proc.returncode}):\n" + tail(alone))
    if any("WRONG" in p.stdout() for p in procs + [back]):
        raise CaseFailed("a wrong sum\n" + "\n".join(tail(p) for p in procs + [back]))
    return (f"kill -9 of node 0 (the job's store and rank 0 of {n}): the other 2 moved to node 1's standby store and "
            f"went on in {took:.2f} s; rank 0's command, run again, joined there in {rejoin_s:.2f} s; with nodes 0 "
            f"and 1 gone, rank 2 (1 of {n}) stopped, fewer than half")


CASES = {"kill9": case_kill9, "twice": lambda job: case_kill9(job, twice=True), "stall": case_stall,
         "chief": None, "store": None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--transport")
    ap.add_argument("--run", help="braid-run (the chief and store cases)")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    logdir = tempfile.mkdtemp(prefix=f"braid-elastic-{a.case}-")
    job = Job(a.worker, logdir, a.transport)
    ok = False
    try:
        if a.case in ("chief", "store"):
            if not a.run:
                ap.error(f"--case {a.case} needs --run BRAID_RUN")
            summary = (case_chief if a.case == "chief" else case_store)(job, a.run)
        else:
            summary = CASES[a.case](job)
        print(f"case {a.case}{'_' + a.transport if a.transport else ''}: {summary}: OK")
        ok = True
    except CaseFailed as e:
        print(f"case {a.case}: FAILED: {e}")
    finally:
        job.close()
        if ok and not a.keep_logs:
            shutil.rmtree(logdir, ignore_errors=True)
        else:
            print(f"logs in {logdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
