#!/usr/bin/python3
"""Runs one job (a braid-run command line) RUNS times in a row, optionally
while busy loops load the CPUs, and fails unless every run exits 0:

    repeat_job.py --runs 100 [--busy 2] [--limit SECONDS] -- braid-run -n 4 prog args...

Each run is bounded by --run-limit seconds (then it is killed and counted as
a failure); the whole is bounded by --limit. Prints one line per failed run
(its exit status or signal, and the last lines it printed) and a summary;
exits 1 on any failure, 0 otherwise. The busy loops (`yes >/dev/null`) are
started and stopped here, each also under coreutils timeout, so none
outlives the test. Load makes the ranks' replies arrive late and out of
turn, which is when races at a communicator's birth and death show.

BRAID_SOAK=K multiplies --runs and --limit by K (scripts/soak.sh): CI runs
each job the number of times its test names, a soak K times as many.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def soak_factor():
    """BRAID_SOAK (default 1): how many times its count a soak runs a
    repeated test (here and in tests/faults/lifecycle_matrix.py)."""
    text = os.environ.get("BRAID_SOAK", "1")
    if not text.isdigit() or int(text) < 1:
        sys.exit(f"{os.path.basename(sys.argv[0])}: BRAID_SOAK={text!r}: expected a whole number of 1 or more")
    return int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--busy", type=int, default=0, help="busy loops to run beside the jobs")
    parser.add_argument("--limit", type=float, default=600, help="seconds for all the runs together")
    parser.add_argument("--run-limit", type=float, default=60, help="seconds for one run")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    soak = soak_factor()
    args.runs *= soak
    args.limit *= soak
    # Meson stops a test that overruns with SIGTERM: the load goes first.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    busy = [subprocess.Popen(["timeout", str(int(args.limit) + 10), "yes"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            for _ in range(args.busy)]
    started = time.monotonic()
    failures = 0
    done = 0
    try:
        for run in range(args.runs):
            if time.monotonic() - started > args.limit:
                print(f"repeat_job: stopped after {done} of {args.runs} runs: the {args.limit:.0f} s limit passed")
                failures += 1
                break
            # Its own session, so that a run past its limit goes with every
            # process it started.
            job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                out, _ = job.communicate(timeout=args.run_limit)
                status = job.returncode
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                out, _ = job.communicate()
                status = f"killed after {args.run_limit:.0f} s"
            output = out.decode(errors="replace")
            done += 1
            if status != 0:
                failures += 1
                why = (f"signal {signal.Signals(-status).name}" if isinstance(status, int) and status < 0
                       else f"status {status}" if isinstance(status, int) else status)
                tail = "\n    ".join(output.strip().splitlines()[-8:])
                print(f"repeat_job: run {run + 1} of {args.runs} failed ({why}):\n    {tail}", flush=True)
    finally:
        # SIGTERM: coreutils timeout passes it on to `yes` (SIGKILL would
        # leave that running without it).
        for b in busy:
            b.terminate()
            b.wait()
    elapsed = time.monotonic() - started
    print(f"repeat_job: {done - failures} of {args.runs} runs passed, {failures} failed, in "
          f"{elapsed:.1f} s ({args.busy} busy loops beside them): {' '.join(command)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
