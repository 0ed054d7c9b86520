#!/usr/bin/python3
"""The layer rule of DESIGN.md, checked on the sources: a file may include
only headers of its own layer and of the layers below it.

    check_layers.py SOURCE_ROOT

Every layer's include directory is visible to every target (the build exports
src/ and the root to all), so the compiler does not stop a wrong-way include;
this test does. Layers, bottom to top:

    core        src/core/      "core/..."
    bootstrap   src/bootstrap/ "bootstrap/..."   (the store; on core)
    transport   transport/     "transport/..."   (on core)
    topology    topology/      "topology/..."
    collectives collectives/   "collectives/..."
    comm        src/comm/      "comm/..." or its own files
    mirrored    mirrored/      the public API only ("braid/...") and its own files
    python      src/python/    the Python bindings: the public API only, as mirrored

The public headers ("braid/...") may be included anywhere. A quoted include
without a directory is a file of the same folder. Exits 1 naming each file,
line and the layer it reached into.
"""

import re
import sys
from pathlib import Path

# layer -> (folder, the include prefixes it may use besides "braid/" and its own folder)
LAYERS = {
    "core": ("src/core", {"core"}),
    "bootstrap": ("src/bootstrap", {"core", "bootstrap"}),
    "transport": ("transport", {"core", "transport"}),
    "topology": ("topology", {"core", "transport", "topology"}),
    "collectives": ("collectives", {"core", "transport", "topology", "collectives"}),
    "comm": ("src/comm", {"core", "bootstrap", "transport", "topology", "collectives", "comm"}),
    "mirrored": ("mirrored", set()),
    "python": ("src/python", set()),
}
# Where each prefix's layer lives, to name it in a message.
OWNER = {"core": "core", "bootstrap": "bootstrap", "transport": "transport", "topology": "topology",
         "collectives": "collectives", "comm": "comm", "mirrored": "mirrored", "python": "python"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    problems = []
    checked = 0
    for layer, (folder, allowed) in LAYERS.items():
        base = root / folder
        if not base.is_dir():
            problems.append(f"{folder}/: the folder of layer {layer} is missing")
            continue
        for path in sorted(p for p in base.rglob("*") if p.suffix in (".cpp", ".hpp", ".h", ".c", ".cu", ".cuh")):
            checked += 1
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if "/" not in target:
                    if not (path.parent / target).exists():
                        problems.append(f"{path.relative_to(root)}:{number}: includes \"{target}\", which is not in "
                                        f"its folder")
                    continue
                prefix = target.split("/", 1)[0]
                if prefix == "braid" or prefix in allowed:
                    continue
                if layer == "mirrored" and prefix == "mirrored":
                    continue
                owner = OWNER.get(prefix, prefix)
                problems.append(f"{path.relative_to(root)}:{number}: layer {layer} includes \"{target}\" of layer "
                                f"{owner}, which is not below it (DESIGN.md: data flows down)")
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} wrong-way include(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
