#!/usr/bin/python3
"""Laptops come and go: braid-train --elastic on two network namespaces.

    elastic_laptops.py --run BRAID_RUN --train BRAID_TRAIN --case linkcut|kill9|chief
                       [--ranks 2] [--epochs 30] [--keep-logs]

The pair of two_laptops.py (laptop-a and laptop-b, joined by a veth pair
shaped to 1 Gbit/s with tc tbf, each with its own host name and /etc/hosts),
R ranks per laptop (--ranks, default 2), braid-run --elastic on each with
--master laptop-a:40000,laptop-b:40000 (the job's store runs in laptop-a's
braid-run, a standby in laptop-b's), braid-train --elastic --per-rank:

  linkcut  laptop-b's link is set down once epoch 3 ended; laptop-a's ranks
           go on by themselves (the time from the cut is printed), with equal
           replica hashes; laptop-b's processes are killed (the lid closed),
           its link comes back, and the same braid-run command runs again there: its ranks join the running job (the time from
           starting is printed).
  kill9    kill -9 of one rank on laptop-b once epoch 3 ended; the others go
           on; that rank's command (its BRAID_* identity) runs again and
           joins.
  chief    the chief's machine leaves: laptop-a's link is set down once
           epoch 3 ended, and its processes (the store's braid-run, the
           chief) are killed; laptop-b's ranks move to the standby store and
           go on; laptop-a's link comes back, the same braid-run command runs
           there again, and its ranks find the job at laptop-b and join it.

In both, from the end of the first epoch after the rejoin, every rank prints
the same replica hash at every epoch's end, every process exits 0, and the
final loss is within 1% of an uninterrupted run's on the same pair (run
first). Traffic stays inside the two namespaces; they are removed at the
end. Exits 0 (pass), 1 (fail) or 77 (skip: not root, no ip/tc, no namespaces).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "netns"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mirrored" / "netns"))
from two_hosts import Rank  # noqa: E402
from two_laptops import HOSTNAME, Laptops, Skipped, clean_env  # noqa: E402
from veth_pair import IpFailed, NamespacesUnavailable, run_ip  # noqa: E402

SKIP = 77
TIMEOUT_S = 4
STORE = f"{HOSTNAME[0]}:40000,{HOSTNAME[1]}:40000"
EPOCH_LINE = re.compile(r"^(?:\[(\d+)\] )?rank (\d+) of (\d+) on (\S+): epoch (\d+)  replica hash ([0-9a-f]{16})$", re.M)
CHANGE_LINE = re.compile(r"^(?:\[(\d+)\] )?\[elastic\] rank (\d+) of (\d+) on (\S+): replicas (\d+) -> (\d+) \(([^)]*)\)",
                         re.M)
FINAL_LOSS = re.compile(r"Summary: .*final loss ([0-9.]+)\.")


class Failed(Exception):
    pass


class Proc(Rank):
    """A process in a laptop's namespace (two_hosts.py's Rank: output in files, killed with its group)."""

    def __init__(self, net, host, argv, env, logdir, tag):
        super().__init__(tag, net.prefix(host) + argv, env, logdir, "elastic")
        self.tag = tag

    def text(self):
        return self.stdout() + self.stderr()

    def kill(self):
        super().kill()
        self.wait()


def wait_until(what, bound_s, condition, procs):
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if condition():
            return time.monotonic()
        time.sleep(0.02)
    raise Failed(f"{what}: not within {bound_s} s\n" + "\n".join(p.tail() for p in procs))


def wait_exit(procs, bound_s):
    end = time.monotonic() + bound_s
    while time.monotonic() < end and any(p.proc.poll() is None for p in procs):
        time.sleep(0.05)
    hung = [p for p in procs if p.proc.poll() is None]
    for p in hung:
        p.kill()
    if hung:
        raise Failed("HANG: " + ", ".join(p.tag for p in hung) + f" still running after {bound_s} s\n" +
                     "\n".join(p.tail() for p in hung))


def train_args(args):
    # A learning rate at which the course of the loss does not hinge on the
    # last bit of a sum (at braid-train's default 0.5 with momentum 0.9 the
    # epoch losses of one run swing by 10%, and a sum over 2 replicas instead
    # of 4 takes another course). A pause of 1 ms a step keeps laptop-a alone
    # training long enough for laptop-b to come back on a loaded machine
    # (without it, two ranks on shared memory finished the run first).
    return [args.train, "--elastic", "--per-rank", "--epochs", str(args.epochs), "--samples", str(args.samples),
            "--lr", "0.1", "--momentum", "0.5", "--step-ms", "1"]


def braid_run(args, host):
    return [args.run, "-n", str(args.ranks), "--nnodes", "2", "--node-rank", str(host), "--master", STORE,
            "--elastic", "--timeout", "300s", "--"] + train_args(args)


GRACE = "1s"  # --grace: a loaded 2-core CI machine may hold a survivor back longer than the default 0.5 s


def env():
    return clean_env(BRAID_TIMEOUT=f"{TIMEOUT_S}s", BRAID_ELASTIC_GRACE=GRACE, BRAID_DEBUG="WARN",
                     BRAID_JOB_ID=f"elastic-laptops-{os.getpid()}")


def final_loss(proc):
    m = FINAL_LOSS.search(proc.text())
    if not m:
        raise Failed(f"no final loss in {proc.tag}'s output\n" + proc.tail())
    return float(m.group(1))


def reference(net, args, logdir):
    runs = [Proc(net, h, braid_run(args, h), env(), logdir, f"reference-{HOSTNAME[h]}") for h in (0, 1)]
    wait_exit(runs, 240)
    for p in runs:
        if p.proc.returncode != 0:
            raise Failed("the uninterrupted run failed\n" + p.tail())
    return final_loss(runs[0])


def check_hashes(texts, args, first_full_epoch):
    """Every epoch's hash lines agree; from first_full_epoch on, all 2R ranks printed one."""
    by_epoch = {}
    for text in texts:
        for m in EPOCH_LINE.finditer(text):
            by_epoch.setdefault(int(m.group(5)), []).append((int(m.group(2)), int(m.group(3)), m.group(6)))
    problems = []
    for epoch, lines in sorted(by_epoch.items()):
        hashes = {h for _, _, h in lines}
        if len(hashes) != 1:
            problems.append(f"epoch {epoch}: the ranks printed {len(hashes)} replica hashes: {sorted(lines)}")
        if epoch >= first_full_epoch and sorted(r for r, _, _ in lines) != list(range(2 * args.ranks)):
            problems.append(f"epoch {epoch}: the hash lines came from ranks {sorted(r for r, _, _ in lines)}, "
                            f"not all {2 * args.ranks}")
    # An epoch whose end met the fault reports nothing: the ranks went on
    # from the next one ("going on at step N (end of epoch E)").
    unreported = {int(e) for text in texts for e in re.findall(r"going on at step \d+ \(end of epoch (\d+)\)", text)}
    missing = set(range(1, args.epochs + 1)) - set(by_epoch)
    if missing - unreported:
        problems.append(f"no hash lines for epochs {sorted(missing - unreported)}")
    if problems:
        raise Failed("replica hashes:\n  " + "\n  ".join(problems[:10]))
    return by_epoch


def epoch_done(proc, epoch):
    return re.search(rf"^\[0\]   epoch {epoch}  loss", proc.text(), re.M) is not None


def case_run(net, args, logdir, case):
    a = Proc(net, 0, braid_run(args, 0), env(), logdir, "a")
    b = Proc(net, 1, braid_run(args, 1), env(), logdir, "b")
    procs = [a, b]
    try:
        wait_until("epoch 3 ends", 120, lambda: epoch_done(a, 3), procs)
        survivor = a
        if case in ("linkcut", "chief"):
            # The machine that leaves: laptop-b, or laptop-a with the job's
            # store and the chief.
            gone, survivor = (1, a) if case == "linkcut" else (0, b)
            run_ip("netns", "exec", net.ns[gone], "ip", "link", "set", "dev", net.dev[gone], "down")
            t0 = time.monotonic()
            # The other laptop's ranks go on alone: each says so.
            went_on = wait_until(f"{HOSTNAME[1 - gone]}'s ranks go on without {HOSTNAME[gone]}", TIMEOUT_S + 15,
                                 lambda: sum(1 for m in CHANGE_LINE.finditer(survivor.text()) if m.group(7) == "lost")
                                 >= args.ranks, procs)
            # The lid closed: the processes there are gone. (Left alone,
            # they go on as a second job of half the ranks, or give up once
            # they find no store, saying to run the same command again.)
            left = procs[gone]
            left.kill()
            run_ip("netns", "exec", net.ns[gone], "ip", "link", "set", "dev", net.dev[gone], "up")
            time.sleep(0.5)  # the link's carrier
            went_on_s = went_on - t0
            t1 = time.monotonic()
            back = Proc(net, gone, braid_run(args, gone), env(), logdir, f"{'ab'[gone]}-again")
            procs = [survivor, back]
            joiners = args.ranks
        else:
            pids = subprocess.run(["pgrep", "-f", "-P", str(b.proc.pid), "braid-train"], capture_output=True,
                                  text=True).stdout.split()
            if not pids:
                raise Failed("cannot find laptop-b's ranks\n" + b.tail())
            victim = int(pids[-1])
            identity = dict(line.split("=", 1) for line in
                            Path(f"/proc/{victim}/environ").read_bytes().decode(errors="replace").split("\0")
                            if line.startswith("BRAID_") and "=" in line)
            os.kill(victim, signal.SIGKILL)
            t0 = time.monotonic()
            went_on = wait_until("the others go on without the killed rank", TIMEOUT_S + 15,
                                 lambda: sum(1 for m in CHANGE_LINE.finditer(a.text() + b.text())
                                             if m.group(7) == "lost") >= 2 * args.ranks - 1, procs)
            went_on_s = went_on - t0
            t1 = time.monotonic()
            again = dict(env(), **identity)
            b2 = Proc(net, 1, train_args(args), again, logdir, "killed-rank-again")
            procs = [a, b, b2]
            joiners = 1
        # The newcomers are admitted: every member, and they, say "joined".
        wait_until("the returning ranks join", 30,
                   lambda: sum(1 for p in procs for m in CHANGE_LINE.finditer(p.text())
                               if "joined" in m.group(7) and int(m.group(6)) == 2 * args.ranks)
                   >= 2 * args.ranks, procs)
        rejoin_s = time.monotonic() - t1
        joined_epoch = max(int(m.group(5)) for m in EPOCH_LINE.finditer(survivor.text()))
        wait_exit(procs, 240)
        for p in procs:
            if p.proc.returncode != 0:
                raise Failed(f"{p.tag} ended with exit {p.proc.returncode}\n" + p.tail())
        texts = [p.text() for p in procs] + ([left.text()] if case != "kill9" else [])
        check_hashes(texts, args, joined_epoch + 2)
        return went_on_s, rejoin_s, final_loss(survivor), joiners
    finally:
        for p in procs + [a, b]:
            p.kill()


def main():
    global GRACE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--case", required=True, choices=["linkcut", "kill9", "chief"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--grace", default=GRACE, help="BRAID_ELASTIC_GRACE (default %(default)s)")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    GRACE = args.grace
    args.run, args.train = os.path.abspath(args.run), os.path.abspath(args.train)
    logdir = tempfile.mkdtemp(prefix=f"braid-elastic-laptops-{args.case}-")
    status = 0
    try:
        with Laptops() as net:
            ref = reference(net, args, logdir)
            went_on_s, rejoin_s, loss, joiners = case_run(net, args, logdir, args.case)
            diff = abs(loss - ref) / ref
            if diff > 0.01:
                raise Failed(f"the final loss {loss:.6f} is {100 * diff:.2f}% from the uninterrupted run's {ref:.6f}")
            what = {"linkcut": "laptop-b's link cut after epoch 3",
                    "kill9": "kill -9 of one rank on laptop-b after epoch 3",
                    "chief": "laptop-a (the chief and the job's store) gone after epoch 3"}[args.case]
            bound = TIMEOUT_S + 1.5
            if went_on_s > bound + 3:  # a loaded machine; the figure is printed either way
                raise Failed(f"the survivors went on {went_on_s:.2f} s after the fault (BRAID_TIMEOUT {TIMEOUT_S} s)")
            print(f"elastic_laptops {args.case}: {2 * args.ranks} ranks on 2 laptops (1 Gbit tbf), {what}: the "
                  f"others went on in {went_on_s:.2f} s (BRAID_TIMEOUT {TIMEOUT_S} s, grace {GRACE}); {joiners} rank(s) started again "
                  f"joined in {rejoin_s:.2f} s; replica hashes equal at every epoch; final loss {loss:.6f} against "
                  f"{ref:.6f} uninterrupted ({100 * diff:.3f}%): OK", flush=True)
    except (Skipped, NamespacesUnavailable) as e:
        print(f"elastic_laptops: SKIPPED: {e}")
        status = SKIP
    except (Failed, IpFailed) as e:
        print(f"elastic_laptops {args.case}: FAILED: {e}")
        status = 1
    finally:
        if args.keep_logs or status == 1:
            print(f"  (logs in {logdir})")
        else:
            shutil.rmtree(logdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
