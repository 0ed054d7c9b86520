#!/usr/bin/python3
"""What `pip install .` puts in the wheel, read from Meson's install plan
without compiling anything:

    check_wheel_contents.py MESON SOURCE_DIR PYTHON

1. `meson setup` of SOURCE_DIR in a temporary folder as meson-python does it:
   pyproject.toml's setup arguments (python_only) and a native file naming
   PYTHON as the interpreter.
2. `meson introspect --install-plan`: every file goes to {py_platlib} or
   {py_purelib} (meson-python refuses a wheel with anything else), and the
   package braid holds __init__.py, mirrored.py and the extension _braid,
   plus torch.py and the extension _braid_torch when PYTHON imports torch.

The wheel itself (a full static build of braid, minutes) is built by hand:
pip wheel --no-build-isolation --no-deps -w DIR SOURCE_DIR.

Exits 77 (skipped) where PYTHON's tomllib is missing (Python < 3.11) (the test is defined only where the Python package is built).
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from checked_command import SKIP, Failure, exit_with, run



def main():
    meson, source, python = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    try:
        import tomllib
    except ImportError:
        print("skipped: tomllib needs Python 3.11")
        return SKIP
    setup_args = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["meson-python"]["args"]["setup"]
    has_torch = subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
    with tempfile.TemporaryDirectory(prefix="braid-wheel-plan-") as tmp:
        tmp = Path(tmp)
        native = tmp / "native.ini"
        native.write_text(f"[binaries]\npython = '{python}'\n")
        run([meson, "setup", tmp / "build", source, "--native-file", native] + setup_args, timeout=300)
        plan = json.loads(run([meson, "introspect", "--install-plan", tmp / "build"]))
    destinations = [entry["destination"] for group in plan.values() for entry in group.values()]
    outside = [d for d in destinations if not d.startswith(("{py_platlib}/", "{py_purelib}/"))]
    if outside:
        raise Failure("pip install . would refuse files outside the Python folders:\n  " + "\n  ".join(outside))
    package = sorted(d.split("/", 1)[1] for d in destinations)
    wanted = ["braid/__init__.py", "braid/mirrored.py", "braid/_braid."]
    if has_torch:
        wanted += ["braid/torch.py", "braid/_braid_torch."]
    missing = [w for w in wanted if not any(p == w or (w.endswith(".") and p.startswith(w)) for p in package)]
    if missing:
        raise Failure(f"the wheel would lack {', '.join(missing)}; it holds:\n  " + "\n  ".join(package))
    print(f"the wheel would hold {', '.join(package)}" + ("" if has_torch else f" ({python} has no torch)"))
    return 0


if __name__ == "__main__":
    exit_with(main)
