#!/usr/bin/python3
"""Writes the settings table of docs/settings.md from the table in the code.

    settings-doc.py BRAID_RUN DOC           rewrite DOC's table
    settings-doc.py BRAID_RUN DOC --check   exit 1, with a diff, if it differs

The table sits between the lines <!-- settings-table:begin --> and
<!-- settings-table:end -->; `braid-run --env-help` prints it from
setting_table() (src/core/settings.cpp). `ninja -C build settings-doc` runs
the first form.
"""

import difflib
import subprocess
import sys

BEGIN, END = "<!-- settings-table:begin -->\n", "<!-- settings-table:end -->"


def main():
    braid_run, doc = sys.argv[1], sys.argv[2]
    check = sys.argv[3:] == ["--check"]
    table = subprocess.run([braid_run, "--env-help"], check=True, capture_output=True, text=True).stdout
    text = open(doc).read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"{doc}: no {BEGIN.strip()} ... {END} block")
    new = text[:start + len(BEGIN)] + table + text[end:]
    if new == text:
        return 0
    if check:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), doc, "braid-run --env-help"))
        print(f"{doc} differs from the settings table in src/core/settings.cpp: run `ninja -C BUILD settings-doc`")
        return 1
    open(doc, "w").write(new)
    print(f"{doc}: settings table written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
