"""What the packaging checks share: a command that must succeed, the
exception a failed check raises, and the exit status a check ends with."""

import subprocess
import sys

SKIP = 77  # Meson's "skipped"


class Failure(Exception):
    pass


def run(cmd, timeout=120, **kwargs):
    """The command's stdout; Failure with its output when it exits non-zero."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if proc.returncode != 0:
        raise Failure(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def exit_with(main):
    """Exits with main()'s status, or 1 after printing why a check failed."""
    try:
        sys.exit(main())
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
