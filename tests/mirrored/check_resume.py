#!/usr/bin/python3
"""A laptop leaving mid-training, and the job resumed (docs/two-machines.md).

    check_resume.py --train BRAID_TRAIN [--epochs E] [--keep-logs]

Two ranks of braid-train (MultiWorkerMirrored), each started as a person
starts one per laptop: its own process with BRAID_RANK, BRAID_WORLD_SIZE and
BRAID_STORE_ADDR, over TCP on loopback (BRAID_TRANSPORT=tcp, as between two
machines). Then:

  1. uninterrupted: E epochs; the chief's last epoch line gives the replica
     hash, which both ranks must print;
  2. for each rank V in 1, 0: the same run with --checkpoint-dir and
     --checkpoint-every (a step inside an epoch, so resuming starts mid-epoch);
     after the chief says its second checkpoint is written, kill -9 rank V.
     The survivor must exit with status 3 within 5 s (the time to its message
     is printed), its message naming rank V, the last checkpoint (the step
     of the chief's last "checkpoint:" line, or the next one where the kill
     landed during a save) and the --resume command; the survivor chief must
     call the file intact. The file must be a checkpoint (magic) with no
     partial write in its place;
  3. both ranks restarted with --resume: the chief resumes from the step the
     message named, and both end with the uninterrupted run's hash, bit for
     bit.

Every wait is bounded; every process this script starts is killed in a
finally block. Exits 0 (pass) or 1 (fail).
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

EXIT_PEER_LOST = 3
DETECT_BOUND_S = 5.0
HASH = re.compile(r"rank (\d+) on \S+: epoch (\d+)  replica hash ([0-9a-f]{16})")
CHECKPOINT = re.compile(r"^checkpoint: step (\d+) ")


class Failed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rank:
    """One braid-train process; its output lines, timestamped as they come."""

    def __init__(self, train, rank, port, job, args, log_dir):
        env = dict(os.environ, BRAID_RANK=str(rank), BRAID_WORLD_SIZE="2", BRAID_STORE_ADDR=f"127.0.0.1:{port}",
                   BRAID_JOB_ID=job, BRAID_TRANSPORT="tcp", BRAID_SOCKET_IFNAME="lo")
        for name in ("BRAID_LOCAL_RANK", "BRAID_LOCAL_SIZE"):
            env.pop(name, None)
        self.rank = rank
        self.cmd = [train, *args]
        self.proc = subprocess.Popen(self.cmd, cwd=log_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = {"out": [], "err": []}
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(stream, key), daemon=True)
                        for stream, key in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for r in self.readers:
            r.start()

    def _read(self, stream, key):
        for line in stream:
            with self.cond:
                self.lines[key].append((time.monotonic(), line.rstrip("\n")))
                self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        """Waits until predicate(stdout lines) holds; False on timeout or exit."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate([l for _, l in self.lines["out"]]):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return predicate([l for _, l in self.lines["out"]])
                self.cond.wait(min(left, 0.05))
            return True

    def finish(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"rank {self.rank} did not exit within {timeout} s")
        for r in self.readers:
            r.join(5)
        return self.proc.returncode

    def out(self):
        return [l for _, l in self.lines["out"]]

    def err(self):
        return [l for _, l in self.lines["err"]]

    def dump(self):
        return "\n".join([f"  [{self.rank}] $ {' '.join(self.cmd)}"] +
                         [f"  [{self.rank}] {l}" for l in self.out()] + [f"  [{self.rank}] ! {l}" for l in self.err()])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Job:
    def __init__(self, train, args, log_dir, started):
        port, job = free_port(), f"check-resume-{os.getpid()}-{len(started)}"
        self.ranks = [Rank(train, r, port, job, args, log_dir) for r in (0, 1)]
        started.extend(self.ranks)

    def finish(self, timeout=120):
        codes = [r.finish(timeout) for r in self.ranks]
        if codes != [0, 0]:
            raise Failed(f"exit statuses {codes}\n" + "\n".join(r.dump() for r in self.ranks))

    def final_hash(self, epochs):
        hashes = {}
        for r in self.ranks:
            for line in r.out():
                m = HASH.search(line)
                if m and int(m.group(2)) == epochs:
                    hashes[int(m.group(1))] = m.group(3)
        if sorted(hashes) != [0, 1] or len(set(hashes.values())) != 1:
            raise Failed(f"expected one replica hash of epoch {epochs} from both ranks, got {hashes}\n" +
                         "\n".join(r.dump() for r in self.ranks))
        return hashes[0]


def interrupted(train, args, every, victim, log_dir, started):
    """Kills rank `victim` after the chief's 2nd checkpoint; returns the steps --resume may start from."""
    job = Job(train, args, log_dir, started)
    chief, survivor, lost = job.ranks[0], job.ranks[1 - victim], job.ranks[victim]
    if not chief.wait_for(lambda out: sum(bool(CHECKPOINT.match(l)) for l in out) >= 2, 120):
        raise Failed("the chief did not write 2 checkpoints within 120 s\n" + chief.dump())
    killed_at = time.monotonic()
    lost.proc.send_signal(signal.SIGKILL)
    code = survivor.finish(30)
    exited_s = time.monotonic() - killed_at
    lost.finish(10)
    advice = [(t, l) for t, l in survivor.lines["err"] if l.startswith("braid-train: ")]
    told_s = advice[0][0] - killed_at if advice else float("nan")
    print(f"kill -9 rank {victim}: rank {1 - victim} printed its message {told_s:.3f} s later and exited with "
          f"status {code} {exited_s:.3f} s later")
    text = "\n".join(l for _, l in advice)
    print(text)
    everything = "\n".join(r.dump() for r in job.ranks)
    if any(l.startswith("Summary:") for l in chief.out()):
        raise Failed("training ended before the kill landed (make the run longer)\n" + everything)
    if code != EXIT_PEER_LOST:
        raise Failed(f"the survivor exited with status {code}, not {EXIT_PEER_LOST}\n" + everything)
    if exited_s > DETECT_BOUND_S:
        raise Failed(f"the survivor took {exited_s:.1f} s to stop (bound {DETECT_BOUND_S} s)\n" + everything)
    wanted = [f"rank {1 - victim} lost rank {victim} ", "start every rank again as before, with --resume", " --resume"]
    if victim != 0:
        wanted.append("is intact (read back and its checksum verified just now)")
    else:
        wanted.append("on rank 0's machine")
    missing = [w for w in wanted if w not in text]
    named = re.search(r"the last checkpoint, (\S+, )?step (\d+) \(", text)
    if missing or not named:
        raise Failed(f"the survivor's message lacks {missing or 'the last checkpoint'}\n" + everything)
    # The kill may land while the next checkpoint is being saved, after the
    # chief's last "checkpoint:" line: then the message names that one (the
    # chief reads the file; a surviving rank 1 knows every save that ended).
    printed = [int(CHECKPOINT.match(l).group(1)) for l in chief.out() if CHECKPOINT.match(l)]
    step = int(named.group(2))
    if step not in (printed[-1], printed[-1] + every):
        raise Failed(f"the survivor names step {step}; the chief's last checkpoint line says {printed[-1]}\n" +
                     everything)
    if victim == 0 and ", or the next one if rank 0 finished writing it" in text:
        return (step, step + every)
    return (step,)


def check_file(path):
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic != b"BRAIDCKP":
        raise Failed(f"{path} does not start with the checkpoint magic: {magic!r}")


def resumed(train, args, log_dir, started, steps, epochs):
    job = Job(train, args + ["--resume"], log_dir, started)
    job.finish()
    line = next((l for l in job.ranks[0].out() if l.startswith("resumed from ")), "")
    if not any(f": step {s} (" in line for s in steps):
        raise Failed(f"expected the chief to resume from step {' or '.join(map(str, steps))}, it said: {line!r}\n" +
                     job.ranks[0].dump())
    print(line)
    return job.final_hash(epochs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--keep-logs", action="store_true")
    opts = parser.parse_args()
    train = os.path.abspath(opts.train)
    log_dir = tempfile.mkdtemp(prefix="braid-resume-")
    started = []
    begun = time.monotonic()
    common = ["--per-rank", "--no-reference", "--samples", "1024", "--global-batch", "32", "--epochs", str(opts.epochs)]
    every = 50
    checkpoints = ["--checkpoint-dir", "ckpt", "--checkpoint-every", str(every)]
    try:
        job = Job(train, common, log_dir, started)
        job.finish()
        uninterrupted = job.final_hash(opts.epochs)
        print(f"uninterrupted: replica hash {uninterrupted} after {opts.epochs} epochs")
        for victim in (1, 0):
            shutil.rmtree(os.path.join(log_dir, "ckpt"), ignore_errors=True)
            steps = interrupted(train, common + checkpoints, every, victim, log_dir, started)
            check_file(os.path.join(log_dir, "ckpt", "braid-train.ckpt"))
            after = resumed(train, common + checkpoints, log_dir, started, steps, opts.epochs)
            print(f"killed rank {victim}, resumed: replica hash {after}")
            if after != uninterrupted:
                raise Failed(f"after resuming, the replica hash is {after}, not {uninterrupted} as uninterrupted")
        print(f"OK ({time.monotonic() - begun:.1f} s)")
        return 0
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for r in started:
            r.kill()
        if opts.keep_logs:
            print(f"logs in {log_dir}")
        else:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
