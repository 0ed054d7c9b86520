"""braid-perf's JSON rows (--json: one object per line, after braid-run's
rank prefix), for the scripts in bench/ that run it and read its output."""

import json


def out_of_place_rows(stdout):
    """The rows of out-of-place calls in braid-perf's output, in order."""
    for line in stdout.splitlines():
        brace = line.find("{")
        if brace < 0:
            continue
        row = json.loads(line[brace:])
        if not row.get("in_place"):
            yield row
