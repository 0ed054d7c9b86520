#!/usr/bin/python3
"""Jobs never mix, abort reaches every rank: start ranks of fault_worker the
way users get these wrong (two jobs at one store address, a restarted rank, a
loop that re-creates its communicator, strangers on the ports, an abort or a
kill -9 while peers have no link to the rank yet) and check that every rank
ends as it should, in time.

    lifecycle_matrix.py --worker PATH --case NAME|all [--repeat N] [--keep-logs]

Cases (each also a Meson test, suite 'lifecycle'):
  twojobs      job A (BRAID_JOB_ID=A, 3 ranks) and job B (BRAID_JOB_ID=B, 3 ranks)
               at one store address: B's rank 0 finds the port in use, B's ranks
               1 and 2 are refused at once (another job); A completes with
               correct sums.
  dupclaim     the same without job ids: B's rank 1 joins A's store first, then
               A's rank 1 claims rank 1 again: every member fails within 2 s with
               "rank 1 joined twice".
  restart      a job of 3 ranks is running; a second process claims rank 1: it is
               refused at once, naming the running rank 1 and itself (the
               communicator already formed); the job completes.
  latejob      without job ids, job B's ranks 1 and 2 form a communicator with job
               A's rank 0 (nothing tells them apart yet); A's ranks 1 and 2, arriving
               after it formed, are refused at once naming both claims of their rank.
  worldsize    without job ids, ranks 0 and 1 start with world size 3 and rank 2
               with 4: every rank fails within 2 s naming both sizes and who gave them.
  exhaust      rank 0 may open 256 files; 300 silent connections reach its store
               port before ranks 1-3 start: the job completes (the listener keeps at
               most an eighth of the limit in their handshake, oldest closed first).
  cycles       2 ranks create, all-reduce on and destroy a communicator at one
               store address 2000 times: no failure.
  strangers    a 4-rank job whose last rank starts late, with 50 silent
               connections to the store and to each data port of the others,
               against the same job without them: start-up at most 1 s longer.
  abort-{pending,thread,idle}-{4,7}
               rank 1 aborts 0.3 s after a barrier: with an all-to-all pending on
               links not made yet, from a watchdog thread while its main thread
               is blocked in one, or on an idle communicator. abort() returns in
               under 100 ms, its operation fails Aborted, and every other rank's
               next operation (an all-to-all 1 s after the barrier, which needs a
               link to every peer) fails with PeerLost naming rank 1 within 1 s.
  kill9-{4,7}  rank 1 is killed -9 after the barrier, before the other ranks have
               a link to it: their next all-to-all fails with PeerLost naming it
               within 1 s.

Traffic goes to loopback only. Every process is hard-killed after a bound.
Prints one summary line per case and run; exits 0 (pass) or 1 (fail).
"""

import argparse
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_matrix import (CaseFailed, Job, Rank, expect_error, finish, free_port, listening_ports,  # noqa: E402
                          run_in_job, span, stop_cleanly_on_signals, tail)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "multiprocess"))
from repeat_job import soak_factor  # noqa: E402

OP_TIME = re.compile(r"\(op ([0-9.]+) s\)")


def op_seconds(r):
    m = OP_TIME.search(r.failure_line())
    return float(m.group(1)) if m else None


def start_job(job, n, store, timeout, args, extra=None, ranks=None, group=""):
    out = []
    for r in (range(n) if ranks is None else ranks):
        out.append(job.start(r, args, job.env(r, n, store, timeout, extra), group=group))
    return out


# ---- jobs never mix -------------------------------------------------------------


def case_twojobs(job):
    n, timeout_s = 3, 10
    store = f"127.0.0.1:{free_port()}"
    a0 = start_job(job, n, store, f"{timeout_s}s", ["join"], {"BRAID_JOB_ID": "job-A"}, ranks=[0], group="A")[0]
    job.wait_for_listen(a0, int(store.split(":")[1]), 5)
    t0 = time.monotonic()
    b = start_job(job, n, store, f"{timeout_s}s", ["join"], {"BRAID_JOB_ID": "job-B"}, group="B")
    job.wait_all(b, 5)
    a = [a0] + start_job(job, n, store, f"{timeout_s}s", ["join"], {"BRAID_JOB_ID": "job-A"}, ranks=[1, 2], group="A")
    job.wait_all(a, timeout_s + 5)
    problems = []
    expect_error(b[0], [r"[Aa]ddress already in use", re.escape(store)], problems, 2.0, t0)
    for r in b[1:]:
        expect_error(r, [r"FAILED ProtocolMismatch", rf"rank {r.rank}\b", r"another job", r"job-B"], problems, 2.0, t0)
    for r in a:
        if r.proc.returncode != 0 or "OK" not in r.stdout():
            problems.append(f"job A's rank {r.rank} did not complete correctly: {r.failure_line() or r.stdout()!r}")
    took = [r.exit_time - t0 for r in b]
    return finish("twojobs", f"case twojobs: job B's 3 ranks at job A's store address ended in {span(took)} s (port "
                  f"in use; refused as another job); job A completed with correct sums", problems, job)


def case_dupclaim(job):
    n, timeout_s = 3, 10
    store = f"127.0.0.1:{free_port()}"
    # Job A's rank 0 hosts the store; job B's rank 1 claims rank 1 there; then
    # job A's rank 1 claims it again, before rank 2 of either job comes.
    a0 = start_job(job, n, store, f"{timeout_s}s", ["join"], ranks=[0], group="A")[0]
    job.wait_for_listen(a0, int(store.split(":")[1]), 5)
    b1 = start_job(job, n, store, f"{timeout_s}s", ["join"], ranks=[1], group="B")[0]
    time.sleep(0.3)
    t0 = time.monotonic()
    a1 = start_job(job, n, store, f"{timeout_s}s", ["join"], ranks=[1], group="A")[0]
    time.sleep(0.3)
    a2 = start_job(job, n, store, f"{timeout_s}s", ["join"], ranks=[2], group="A")[0]
    members = [a0, a1, a2, b1]
    job.wait_all(members, timeout_s + 5)
    problems = []
    for r in members:
        expect_error(r, [r"rank 1 joined twice \(from \S+ pid \d+ and \S+ pid \d+\)", r"two jobs share the store"],
                     problems, 2.0, t0)
    took = [r.exit_time - t0 for r in members]
    return finish("dupclaim", f"case dupclaim: without job ids, a second claim of rank 1 failed all {len(members)} "
                  f"members in {span(took)} s (bound 2 s)", problems, job)


def case_restart(job):
    n, timeout_s = 3, 10
    store = f"127.0.0.1:{free_port()}"
    go = os.path.join(job.logdir, "go")
    ranks = start_job(job, n, store, f"{timeout_s}s", ["garbage", "--go-file", go, "--count", "4096"])
    job.wait_for_output(ranks, "ready", 15)
    again = job.start(1, ["join"], job.env(1, n, store, "2s"), group="again")
    job.wait_all([again], 6)
    open(go, "w").close()
    job.wait_all(ranks, 10)
    problems = []
    expect_error(again, [r"rank 1 is claimed twice: by \S+ pid \d+, a member .* already formed, and now by \S+ pid "
                         rf"{again.pid}\b", r"restarted"], problems)
    if again.exit_time - again.start > 1.5:
        problems.append(f"the second rank 1 took {again.exit_time - again.start:.2f} s to be refused (bound 1.5 s, "
                        f"its timeout 2 s)")
    for r in ranks:
        if r.proc.returncode != 0 or "OK" not in r.stdout():
            problems.append(f"rank {r.rank} of the running job did not complete: {r.failure_line()!r}")
    return finish("restart", f"case restart: a second rank 1 was refused naming both claims "
                  f"({again.exit_time - again.start:.2f} s, its timeout 2 s); the running job completed", problems, job)


def case_latejob(job):
    n, timeout_s = 3, 10
    store = f"127.0.0.1:{free_port()}"
    go = os.path.join(job.logdir, "go")
    args = ["garbage", "--go-file", go, "--count", "4096"]
    a0 = start_job(job, n, store, f"{timeout_s}s", args, ranks=[0], group="A")[0]
    job.wait_for_listen(a0, int(store.split(":")[1]), 5)
    b = start_job(job, n, store, f"{timeout_s}s", args, ranks=[1, 2], group="B")
    formed = [a0] + b
    job.wait_for_output(formed, "ready", 15)
    t0 = time.monotonic()
    late = start_job(job, n, store, f"{timeout_s}s", ["join"], ranks=[1, 2], group="A-late")
    job.wait_all(late, timeout_s + 5)
    open(go, "w").close()
    job.wait_all(formed, 10)
    problems = []
    for r in late:
        expect_error(r, [rf"rank {r.rank} is claimed twice: by \S+ pid \d+, a member .* already formed, and now by "
                         rf"\S+ pid {r.pid}\b", r"two jobs share the store address"], problems, 2.0, t0)
    took = [r.exit_time - t0 for r in late]
    return finish("latejob", f"case latejob: job A's ranks 1 and 2, arriving after job B's took their numbers, were "
                  f"refused naming both claims in {span(took)} s (bound 2 s)", problems, job)


def case_worldsize(job):
    timeout_s = 10
    store = f"127.0.0.1:{free_port()}"
    first = start_job(job, 3, store, f"{timeout_s}s", ["join"], ranks=[0, 1])
    job.wait_for_listen(first[0], int(store.split(":")[1]), 5)
    time.sleep(0.3)
    t0 = time.monotonic()
    odd = job.start(2, ["join"], job.env(2, 4, store, f"{timeout_s}s"), group="odd")
    ranks = first + [odd]
    job.wait_all(ranks, timeout_s + 5)
    problems = []
    for r in ranks:
        expect_error(r, [r"joins with world size (3|4), but rank \d+ \(\S+ pid \d+\) joined this store's job with "
                         r"world size (3|4)", r"different sizes"], problems, 2.0, t0)
    took = [r.exit_time - t0 for r in ranks]
    return finish("worldsize", f"case worldsize: ranks started with world sizes 3 and 4 at one store all failed "
                  f"naming both in {span(took)} s (bound 2 s, timeout {timeout_s} s)", problems, job)


def case_exhaust(job):
    n, silent, files = 4, 300, 256
    store = f"127.0.0.1:{free_port()}"
    port = int(store.split(":")[1])
    r0 = job.start(0, ["join"], job.env(0, n, store, "20s"), prefix=("prlimit", f"--nofile={files}"))
    job.wait_for_listen(r0, port, 5)
    held = []
    try:
        for _ in range(silent):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass  # the listener closed it already, or the backlog was full a moment on a loaded machine
        if len(held) <= files:
            raise CaseFailed(f"only {len(held)} of {silent} silent connections were made (need more than {files})")
        others = start_job(job, n, store, "20s", ["join"], ranks=[1, 2, 3])
        ranks = [r0] + others
        job.wait_all(ranks, 25)
    finally:
        for s in held:
            s.close()
    problems = []
    for r in ranks:
        if r.proc.returncode != 0 or "OK" not in r.stdout():
            problems.append(f"rank {r.rank} failed: {r.failure_line() or r.stdout()[-300:]!r}")
    if "closing the connection from" not in r0.stderr():
        problems.append("rank 0 did not say it closed silent connections")
    return finish("exhaust", f"case exhaust: rank 0 limited to {files} open files, {len(held)} silent connections to "
                  f"its port: the job completed", problems, job)


def case_cycles(job):
    n, count, timeout_s = 2, 2000, 10
    store = f"127.0.0.1:{free_port()}"
    ranks = start_job(job, n, store, f"{timeout_s}s", ["cycles", "--count", str(count)])
    t0 = time.monotonic()
    job.wait_all(ranks, 240)
    problems = []
    for r in ranks:
        if r.proc.returncode != 0 or f"OK {count} cycles" not in r.stdout():
            problems.append(f"rank {r.rank} failed: {r.failure_line() or r.stdout()[-300:]!r}")
    took = time.monotonic() - t0
    return finish("cycles", f"case cycles: {n} ranks created, all-reduced on and destroyed a communicator at one store "
                  f"address {count} times in {took:.1f} s ({1000 * took / count:.1f} ms a cycle)", problems, job)


def timed_start(job, n, store, strangers):
    """Starts ranks 0..n-2, optionally opens silent connections to the store and
    each of their data ports, then starts rank n-1; returns the seconds from that
    start until every rank is done."""
    port = int(store.split(":")[1])
    first = start_job(job, n, store, "20s", ["join"], ranks=range(n - 1))
    job.wait_for_listen(first[0], port, 5)
    # Every rank listens for data before it publishes its address; wait for them.
    end = time.monotonic() + 5
    while time.monotonic() < end and not all(listening_ports(r.pid) - {port} for r in first):
        time.sleep(0.01)
    held = []
    if strangers:
        targets = [port] + sorted(p for r in first for p in listening_ports(r.pid) - {port})
        for target in targets:
            for _ in range(strangers):
                s = socket.create_connection(("127.0.0.1", target), timeout=2)
                held.append(s)
    t0 = time.monotonic()
    last = job.start(n - 1, ["join"], job.env(n - 1, n, store, "20s"))
    ranks = first + [last]
    try:
        job.wait_all(ranks, 25)
    finally:
        for s in held:
            s.close()
    bad = [r for r in ranks if r.proc.returncode != 0]
    if bad:
        raise CaseFailed("a rank failed:\n" + "\n".join(tail(r) for r in bad))
    return max(r.exit_time for r in ranks) - t0, len(held)


def case_strangers(job):
    n, silent = 4, 50
    base, _ = timed_start(job, n, f"127.0.0.1:{free_port()}", 0)
    loaded, held = timed_start(job, n, f"127.0.0.1:{free_port()}", silent)
    problems = []
    if loaded - base > 1.0:
        problems.append(f"start-up took {loaded:.2f} s with {held} silent connections against {base:.2f} s without "
                        f"(bound: 1 s longer)")
    return finish("strangers", f"case strangers: {n} ranks, start-up {base:.3f} s without and {loaded:.3f} s with "
                  f"{silent} silent connections to the store and each of 3 ranks' data ports ({held} in all)",
                  problems, job)


# ---- abort reaches every rank ---------------------------------------------------


def abort_case(how, n):
    def run(job):
        victim, timeout_s = 1, 20
        store = f"127.0.0.1:{free_port()}"
        ranks = start_job(job, n, store, f"{timeout_s}s",
                          ["abort", "--how", how, "--victim", str(victim), "--delay", "1.0"])
        job.wait_all(ranks, 15)
        problems = []
        v = ranks[victim]
        m = re.search(r"aborted in ([0-9.]+) ms; its operation failed (\w+)", v.stdout())
        if v.proc.returncode != 0 or not m:
            problems.append(f"the victim (rank {victim}) did not report an Aborted operation: "
                            f"{v.stdout().strip()[-400:]!r} {v.failure_line()!r}")
        elif float(m.group(1)) >= 100:
            problems.append(f"abort() took {float(m.group(1)):.1f} ms (bound 100 ms)")
        ops = []
        for r in ranks:
            if r.rank == victim:
                continue
            expect_error(r, [r"FAILED PeerLost", rf"rank {victim}\b"], problems)
            t = op_seconds(r)
            ops.append(t if t is not None else 99)
            if t is None or t > 1.0:
                problems.append(f"rank {r.rank}'s all_to_all took {t} s to fail (bound 1 s)")
        abort_ms = m.group(1) if m else "?"
        return finish(f"abort-{how}-{n}", f"case abort-{how}-{n}: abort() returned in {float(abort_ms):.2f} ms, "
                      f"its operation failed Aborted; the others' next all-to-all failed PeerLost naming rank "
                      f"{victim} in {span(ops)} s", problems, job)
    return run


def kill9_case(n):
    def run(job):
        victim, timeout_s = 1, 20
        store = f"127.0.0.1:{free_port()}"
        go = os.path.join(job.logdir, "go")
        ranks = start_job(job, n, store, f"{timeout_s}s", ["idle", "--go-file", go])
        job.wait_for_output(ranks, "ready", 15)
        os.kill(ranks[victim].pid, signal.SIGKILL)
        ranks[victim].killed_by_us = True
        ranks[victim].proc.wait()
        open(go, "w").close()
        survivors = [r for r in ranks if r.rank != victim]
        job.wait_all(survivors, 10)
        problems = []
        ops = []
        for r in survivors:
            expect_error(r, [r"FAILED PeerLost", rf"rank {victim}\b"], problems)
            t = op_seconds(r)
            ops.append(t if t is not None else 99)
            if t is None or t > 1.0:
                problems.append(f"rank {r.rank}'s all_to_all took {t} s to fail (bound 1 s)")
        return finish(f"kill9-{n}", f"case kill9-{n}: rank {victim} killed -9 before the others linked to it; their "
                      f"next all-to-all failed PeerLost naming it in {span(ops)} s", problems, job)
    return run


CASES = {
    "twojobs": case_twojobs,
    "dupclaim": case_dupclaim,
    "restart": case_restart,
    "cycles": case_cycles,
    "strangers": case_strangers,
    "latejob": case_latejob,
    "worldsize": case_worldsize,
    "exhaust": case_exhaust,
}
for _how in ("pending", "thread", "idle"):
    for _n in (4, 7):
        CASES[f"abort-{_how}-{_n}"] = abort_case(_how, _n)
for _n in (4, 7):
    CASES[f"kill9-{_n}"] = kill9_case(_n)


class LifecycleJob(Job):
    def start(self, rank, args, env, prefix=(), group=""):
        """Starts a rank whose output files are apart from other groups' (two
        jobs in one case both have a rank 1)."""
        logdir = os.path.join(self.logdir, group) if group else self.logdir
        os.makedirs(logdir, exist_ok=True)
        r = Rank(rank, [self.worker] + list(args), env, logdir, prefix)
        self.ranks.append(r)
        return r

    def wait_for_listen(self, r, port, bound_s):
        """Waits until process r listens on port (the store is up)."""
        end = time.monotonic() + bound_s
        while time.monotonic() < end:
            if r.done:
                raise CaseFailed(f"rank {r.rank} exited before it listened on {port}:\n{tail(r)}")
            try:
                if port in listening_ports(r.pid):
                    return
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.005)
        raise CaseFailed(f"rank {r.rank} did not listen on port {port} within {bound_s} s:\n{tail(r)}")

    def wait_for_stderr(self, r, text, bound_s):
        """Waits up to bound_s for text on r's stderr (a best-effort pause)."""
        end = time.monotonic() + bound_s
        while time.monotonic() < end and text not in r.stderr():
            time.sleep(0.01)


def main():
    stop_cleanly_on_signals("lifecycle_matrix")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES) + ["all"])
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each case this many times in a row (times BRAID_SOAK, scripts/soak.sh)")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    soak = soak_factor()
    worker = os.path.abspath(args.worker)
    names = list(CASES) if args.case == "all" else [args.case]
    failed = 0
    for name in names:
        for i in range(1, args.repeat * soak + 1):
            if run_in_job(name, CASES[name], lambda logdir: LifecycleJob(worker, logdir), args.keep_logs,
                          f" [run {i}]"):
                failed += 1
                break  # "in a row": the first failure ends this case
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
