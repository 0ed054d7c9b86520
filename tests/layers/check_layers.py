#!/usr/bin/python3
"""The layer rule of docs/architecture.md, checked on the sources: a file may include
only headers of its own layer and of the layers below it.

    check_layers.py SOURCE_ROOT

Every layer's include directory is visible to every target (the build exports
src/ and the root to all), so the compiler does not stop a wrong-way include;
this test does. Layers, bottom to top (docs/architecture.md):

    core        src/core/      "core/..."
    bootstrap   src/bootstrap/ "bootstrap/..."   (the store; on core)
    transport   transport/     "transport/..."   (on core)
    topology    topology/      "topology/..."
    collectives collectives/   "collectives/..."
    comm        comm/          "comm/..." or its own files
    mirrored    mirrored/      the public API only ("braid/...") and its own files
    python      python/        the Python bindings: the public API only, as mirrored
    public      include/braid/ the public headers: only each other ("braid/...")
    tools       tools/, bench/ any layer (they measure and print its insides), and
                               their own files; no layer includes them

Inside transport/, each transport's folder (tcp/, shm/, ucx/, cuda_ipc/) sees
the shared files of transport/ and its own folder only, so that adding a
transport touches no other; TRANSPORT_USES names the one declared exception
(cuda_ipc wraps the shm link for host buffers). transport/registry.cpp, the
ordered list of transports, may include every one of them.

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
    "comm": ("comm", {"core", "bootstrap", "transport", "topology", "collectives", "comm"}),
    "mirrored": ("mirrored", set()),
    "python": ("python", set()),
    "public": ("include/braid", set()),
    "tools": ("tools", {"core", "bootstrap", "transport", "topology", "collectives", "comm", "tools"}),
    "bench": ("bench", {"core", "bootstrap", "transport", "topology", "collectives", "comm", "tools", "bench"}),
}
# transport/<kind>/ -> the other transports' folders it may include.
TRANSPORTS = ("tcp", "shm", "ucx", "cuda_ipc")
TRANSPORT_USES = {"cuda_ipc": {"shm"}}
# Where each prefix's layer lives, to name it in a message.
OWNER = {"core": "core", "bootstrap": "bootstrap", "transport": "transport", "topology": "topology",
         "collectives": "collectives", "comm": "comm", "mirrored": "mirrored", "python": "python",
         "tools": "tools", "bench": "bench"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def transport_problem(relative, target):
    """Why a file at transport/<relative> may not include "<target>", or None."""
    parts = target.split("/")
    if len(parts) < 3 or parts[1] not in TRANSPORTS:
        return None  # the shared files of transport/
    home = relative.parts[0] if len(relative.parts) > 1 else None
    if home is None:
        return None if relative.name == "registry.cpp" else (
            f"transport/{relative} includes \"{target}\": only registry.cpp, the list of transports, names one")
    if parts[1] == home or parts[1] in TRANSPORT_USES.get(home, set()):
        return None
    return (f"transport {home} includes \"{target}\" of transport {parts[1]}: a transport sees only transport/'s "
            f"shared files and its own folder (move what both need down to transport/ or core/)")


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
                if layer == "transport" and prefix == "transport":
                    problem = transport_problem(path.relative_to(base), target)
                    if problem:
                        problems.append(f"{path.relative_to(root)}:{number}: {problem}")
                    continue
                if prefix == "braid" or prefix in allowed:
                    continue
                if layer == "mirrored" and prefix == "mirrored":
                    continue
                owner = OWNER.get(prefix, prefix)
                problems.append(f"{path.relative_to(root)}:{number}: layer {layer} includes \"{target}\" of layer "
                                f"{owner}, which is not below it (docs/architecture.md: data flows down)")
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} wrong-way include(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
