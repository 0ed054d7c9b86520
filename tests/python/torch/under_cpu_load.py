"""Runs a command while BUSY processes keep the CPUs busy, and exits with its status:

    under_cpu_load.py --busy 2 --limit 170 -- braid-run -n 4 ...

The busy processes are `yes >/dev/null`, each under coreutils' `timeout` for
--limit seconds, so they end even if this driver is killed; the driver stops
them (by process id) as soon as the command ends. The command is killed after
--limit seconds (exit 124). Load makes the ranks' store requests and replies
arrive late and out of turn, which is when a client that falls out of step
with the store shows.
"""

import argparse
import signal
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument("--limit", type=float, required=True, help="seconds the command and the load may last")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    # Meson stops a test that overruns with SIGTERM: stop the load first.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    busy = [subprocess.Popen(["timeout", str(args.limit), "yes"], stdout=subprocess.DEVNULL)
            for _ in range(args.busy)]
    try:
        return subprocess.run(command, timeout=args.limit, check=False).returncode
    except subprocess.TimeoutExpired:
        print(f"under_cpu_load.py: {' '.join(command)} did not end within {args.limit} s", flush=True)
        return 124
    finally:
        # SIGTERM: timeout passes it on to its yes (a SIGKILL would orphan it).
        for process in busy:
            process.terminate()
        for process in busy:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    sys.exit(main())
