"""A reader of nccl-tests logs, written the way the scripts people keep for
nccl-tests output are (grep the "# Avg bus bandwidth" line, split the data
rows on whitespace into the 13 columns by position), with no knowledge of
braid. tests/bench/check_perf_output.py feeds it braid-perf's table unchanged.

Columns of a row (nccl-tests' *_perf binaries since 2.x):
  size count type redop root | time algbw busbw #wrong (out of place) | time algbw busbw #wrong (in place)
Lines may carry mpirun's --tag-output prefix ("[1,0]<stdout>:").
"""
import re

TAG = re.compile(r"^\[\d+,\d+\]<stdout>:")
AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+)")
OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")


def _number(text):
    return None if text == "N/A" else float(text)


def parse(text):
    """{"rows": [...], "avg_busbw": float or None, "out_of_bounds": int or None, "ok": bool or None}"""
    result = {"rows": [], "avg_busbw": None, "out_of_bounds": None, "ok": None}
    for line in text.splitlines():
        line = TAG.sub("", line).rstrip()
        m = AVG.match(line)
        if m:
            result["avg_busbw"] = float(m.group(1))
            continue
        m = OOB.match(line)
        if m:
            result["out_of_bounds"], result["ok"] = int(m.group(1)), m.group(2) == "OK"
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split()
        if len(f) != 13 or not f[0].isdigit():
            continue
        result["rows"].append({
            "size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4]),
            "oop_time_us": _number(f[5]), "oop_algbw": _number(f[6]), "oop_busbw": _number(f[7]), "oop_wrong": f[8],
            "ip_time_us": _number(f[9]), "ip_algbw": _number(f[10]), "ip_busbw": _number(f[11]), "ip_wrong": f[12],
        })
    return result
