#!/usr/bin/python3
"""braid's version has one source, meson.build's project(); everything that
repeats or reports it must agree:

    check_version.py VERSION SOURCE_ROOT BUILD_DIR TOOL...

- pyproject.toml's [project] version (pip install .'s package),
- braid.h's BRAID_VERSION_MAJOR, _MINOR and _PATCH (the C ABI's
  BRAID_VERSION_CODE; libbraid's build also static_asserts this),
- the installed CMake package's version (BUILD_DIR/src/braidConfigVersion.cmake),
- `TOOL --version` of each tool given, which must print "NAME VERSION".

Exits 1 naming each one that differs.
"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path


def main():
    version, source, build, tools = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
    found = {}
    with open(source / "pyproject.toml", "rb") as f:
        found["pyproject.toml [project] version"] = tomllib.load(f)["project"].get("version", "(dynamic)")
    header = (source / "include" / "braid" / "braid.h").read_text()
    parts = [re.search(rf"#define BRAID_VERSION_{p} (\d+)", header) for p in ("MAJOR", "MINOR", "PATCH")]
    found["braid.h BRAID_VERSION_*"] = ".".join(m.group(1) if m else "?" for m in parts)
    cmake = (build / "src" / "braidConfigVersion.cmake").read_text()
    m = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', cmake)
    found["braidConfigVersion.cmake"] = m.group(1) if m else "?"
    for tool in tools:
        name = Path(tool).name
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30)
        line = proc.stdout.strip()
        found[f"{name} --version"] = line.removeprefix(name + " ") if proc.returncode == 0 and \
            line.startswith(name + " ") else f"{line!r} (status {proc.returncode})"
    wrong = {what: v for what, v in found.items() if v != version}
    for what, v in found.items():
        print(f"{what}: {v}{'' if v == version else '   <- meson.build says ' + version}")
    if wrong:
        print(f"{len(wrong)} place(s) differ from meson.build's version {version}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
