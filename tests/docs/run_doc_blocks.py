#!/usr/bin/python3
"""Runs every shell block of README.md and docs/*.md that is marked runnable.

    run_doc_blocks.py SOURCE_ROOT BUILD_DIR [PAGE[:LINE] ...]

A block is marked by the line `<!-- runnable -->` right above its ```sh
fence; `<!-- runnable needs=GLOB[,GLOB] -->` also names files the block
needs (build/python/braid/_braid*.so), and the block is skipped, saying so,
when one of them is missing from the build (a build without Python, say).
Each block runs as `bash -e -o pipefail` in a scratch folder that looks like
a clone after the quick start: a link to every top-level entry of
SOURCE_ROOT, and `build` linking to BUILD_DIR. Files a block writes stay in
its scratch folder. Jobs a block leaves in the background must end with
status 0 too. Arguments after BUILD_DIR pick pages, or one block by the line
of its fence.

Exits 1 naming each block that failed, with the end of its output; 77 when
every block was skipped.
"""

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARK = re.compile(r"^<!-- runnable(?: needs=(\S+))? -->$")
BLOCK_TIMEOUT_S = 240
SKIP = 77
# After the block: wait for every job it left in the background, failing on
# the first that failed (a plain `wait` returns 0 whatever they did).
WAIT_FOR_JOBS = "\nfor job in $(jobs -p); do wait \"$job\"; done\n"


def runnable_blocks(page):
    """(line of the fence, needs, text) of each marked block of a page."""
    lines = page.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        fence = i + 1
        if fence >= len(lines) or lines[fence].strip() not in ("```sh", "```bash"):
            raise SystemExit(f"{page}:{i + 1}: a runnable mark must sit right above a ```sh block")
        end = next((j for j in range(fence + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise SystemExit(f"{page}:{fence + 1}: the block never ends")
        needs = m.group(1).split(",") if m.group(1) else []
        blocks.append((fence + 1, needs, "\n".join(lines[fence + 1:end]) + "\n"))
    return blocks


def scratch_clone(source, build, into):
    for entry in source.iterdir():
        if entry.name in (".git", "build") or entry.name.startswith("build-"):
            continue
        (into / entry.name).symlink_to(entry)
    (into / "build").symlink_to(build)


def run_block(text, cwd):
    """(exit status or why it failed, output): the block in a process group
    of its own, so that a timeout ends whatever it started too."""
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text + WAIT_FOR_JOBS], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        status = f"timeout after {BLOCK_TIMEOUT_S} s"
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if not isinstance(status, int):
        output, _ = proc.communicate()
    return status, output


def selected(name, line, picks):
    if not picks:
        return True
    return any(p == name or p == f"{name}:{line}" for p in picks)


def main():
    source, build = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    picks = sys.argv[3:]
    pages = [source / "README.md"] + sorted((source / "docs").glob("*.md"))
    ran = skipped = 0
    failures = []
    for page in pages:
        name = str(page.relative_to(source))
        for line, needs, text in runnable_blocks(page):
            if not selected(name, line, picks):
                continue
            missing = [n for n in needs if not glob.glob(str(build / Path(n).relative_to("build")))]
            if missing:
                print(f"{name}:{line}: skipped, the build has no {', '.join(missing)}", flush=True)
                skipped += 1
                continue
            with tempfile.TemporaryDirectory(prefix="braid-doc-") as tmp:
                scratch_clone(source, build, Path(tmp))
                start = time.monotonic()
                status, output = run_block(text, tmp)
            took = time.monotonic() - start
            ran += 1
            if status == 0:
                print(f"{name}:{line}: ok ({took:.1f} s)", flush=True)
                continue
            tail = "\n".join(output.splitlines()[-25:])
            print(f"{name}:{line}: FAILED ({status}, {took:.1f} s)\n{text}--- output (last lines):\n{tail}\n---",
                  flush=True)
            failures.append(f"{name}:{line}")
    print(f"{ran} runnable blocks run, {len(failures)} failed, {skipped} skipped")
    if failures:
        print("failed: " + " ".join(failures))
        return 1
    return SKIP if ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
