#!/usr/bin/python3
"""The store stops lingering for a rank that died (linger_check.cpp).

    linger_check.py BRAID_RUN LINGER_CHECK [--jobs 3]

Runs `braid-run -n 3 linger_check` with BRAID_LINGER=10min and a job limit
of 60 s, and checks in rank 0's log (BRAID_DEBUG=INFO) that its store
stopped lingering because nobody needed it any more, not because its linger
ran out (it cannot, within the limit), and that every rank exited 0.
Exits 0 when every job passed.
"""

import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("braid_run")
    ap.add_argument("linger_check")
    ap.add_argument("--jobs", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ, BRAID_LINGER="10min", BRAID_DEBUG="INFO", BRAID_DEBUG_SUBSYS="ALL")
    failed = 0
    for job in range(args.jobs):
        cmd = [args.braid_run, "-n", "3", "--timeout", "60s", args.linger_check]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
        lines = p.stdout.splitlines()
        rank0 = [l for l in lines if l.startswith("[0] ")]
        ended = [l for l in rank0 if "the braid store at" in l and "nobody needs it any more" in l]
        ran_out = [l for l in rank0 if "the braid store at" in l and "linger ran out" in l]
        right = sum(1 for l in lines if "all_reduce right" in l)
        ok = p.returncode == 0 and ended and not ran_out and right == 3
        print(f"job {job + 1}: exit {p.returncode}, {right} ranks right, store linger "
              f"{'ended: nobody needs it' if ended else 'ran out' if ran_out else 'not seen'}: "
              f"{'ok' if ok else 'FAILED'}")
        if not ok:
            failed += 1
            print("\n".join(lines[-60:]))
    print(f"{args.jobs - failed} of {args.jobs} jobs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
