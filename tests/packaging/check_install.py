#!/usr/bin/python3
"""braid as another project sees it: installed, found with pkg-config and CMake, linked.

    check_install.py MESON BUILD_DIR SOURCE_DIR

1. `meson install --no-rebuild --destdir TMP` of the built tree (the test's
   depends build what is installed).
2. libbraid.so exports the public API only: every symbol `nm -D
   --defined-only` lists is a braid_* function that a public header declares
   or a member, typeinfo or vtable of a class that a public header defines in
   namespace braid, or a function declared there, with only public braid::
   types in its signature; the internals (braid::CommImpl, braid::TcpTransport,
   ...) are not there; the C ABI, Comm and the error classes' typeinfo are.
3. examples/external, copied out of the tree, builds with its Makefile
   against the installed braid.pc (pkg-config --cflags --libs braid, and
   --static for libbraid.a, which names no file of the build machine), with
   its meson.build, and with its CMakeLists.txt through the installed
   braidConfig.cmake (braid::braid, braid::braid_static).
4. Each program runs on 2 ranks over loopback under the installed braid-run
   and prints the right sums; the shared ones load the installed libbraid.so.
5. Where the Python package is built (PYTHON given): it is installed in a
   folder that the interpreter itself reads for the build's prefix (on its
   sys.path without PYTHONPATH; Debian, prefix /usr/local:
   /usr/local/lib/python3.11/dist-packages), so that after a real install
   `python3 -c "import braid, braid.torch"` works with no environment set.
   Then, with PYTHONPATH naming that folder inside the destdir and nothing
   else (no LD_LIBRARY_PATH: the extensions find the destdir's libbraid.so
   by their $ORIGIN rpath), `import braid` and, where braid.torch is built,
   `import braid.torch` load the installed files and library.

    check_install.py MESON BUILD_DIR SOURCE_DIR [PYTHON]

Exits 77 (skipped) when pkg-config, cmake, nm, make, ninja or a compiler is missing.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from checked_command import SKIP, Failure, exit_with, run

OWNER_PREFIXES = ("typeinfo for ", "typeinfo name for ", "vtable for ")
# Internal classes that must never be exported (a sample, on top of the rule).
INTERNAL = ("braid::CommImpl", "braid::TcpTransport", "braid::ShmTransport", "braid::Operation", "braid::Executor",
            "braid::Settings", "braid::Plan", "braid::Poller", "braid::TcpStoreServer")
REQUIRED = ("braid_all_reduce", "braid_comm_init_env", "braid_get_version", "braid_last_error",
            "braid::Comm::all_reduce(void const*, void*, unsigned long, braid::DataType, braid::ReduceOp)",
            "braid::Comm::from_env(braid::CommOptions const&)", "typeinfo for braid::Error",
            "typeinfo for braid::InvalidArgument", "typeinfo for braid::Timeout", "vtable for braid::Error")


IMPORT_CHECK = """
import braid
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libbraid" in line})
print("braid", braid.__file__)
print("libs", *libs)
if IMPORT_TORCH:
    import braid.torch
    print("braid.torch", braid.torch.__file__, braid.torch._braid_torch.__file__)
"""


def check_python_package(python, meson, build, dest):
    """Step 5: the installed package's folder, and the package imported from
    the destdir. Returns a line for the summary."""
    inits = list(dest.rglob("braid/__init__.py"))
    if len(inits) != 1:
        raise Failure(f"expected one installed braid/__init__.py under {dest}, found {inits}")
    package = inits[0].parent
    site = package.parent
    installed_site = "/" + str(site.relative_to(dest))
    torch_built = any((build / "python" / "torch").glob("_braid_torch*.so"))
    expected = ["__init__.py", "mirrored.py", "_braid*.so"] + (["torch.py", "_braid_torch*.so"] if torch_built else [])
    for pattern in expected:
        if not list(package.glob(pattern)):
            raise Failure(f"{pattern} not installed in {package}")
    options = json.loads(run([meson, "introspect", "--buildoptions", build]))
    prefix = next(o["value"] for o in options if o["name"] == "prefix").rstrip("/")
    # The interpreter's own path: no PYTHONPATH (-E), no user site-packages (-s).
    own_path = json.loads(run([python, "-E", "-s", "-c", "import json, sys; print(json.dumps(sys.path))"]))
    reads_prefix = [p for p in own_path
                    if p.startswith(prefix + "/") and ("dist-packages" in p or "site-packages" in p)]
    if reads_prefix and installed_site not in own_path:
        raise Failure(f"the package is installed in {installed_site}, which {python} does not read "
                      f"(its folders under {prefix}: {', '.join(reads_prefix)})")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    out = run([python, "-c", IMPORT_CHECK.replace("IMPORT_TORCH", str(torch_built))], env=env, timeout=120)
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    loaded = lines.get("braid", []) + lines.get("libs", []) + lines.get("braid.torch", [])
    outside = [f for f in loaded if not f.startswith(str(dest))]
    if outside or not lines.get("libs"):
        raise Failure(f"import braid{', braid.torch' if torch_built else ''} with PYTHONPATH={site} loaded files "
                      f"outside the install:\n{out}")
    where = installed_site if reads_prefix else f"{installed_site} (not read by {python}: PYTHONPATH must name it)"
    return f"the Python package{' with braid.torch' if torch_built else ''} in {where} imports"


def public_declarations(include_dir):
    """(C functions, C++ names) declared by libbraid's public headers: braid_*
    functions, and classes/structs/enums defined or functions declared at
    namespace level (column 0) in namespace braid. mirrored/ is another library."""
    c_functions, cpp_names = set(), set()
    for header in sorted(include_dir.glob("*.h*")):
        if header.name == "mirrored.hpp":
            continue
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", header.read_text(), flags=re.S)
        # static inline helpers a header may define are not the library's
        inline = set(re.findall(r"\bstatic\s+inline\b[^;{]*?\b(braid_\w+)\s*\(", text))
        c_functions.update(set(re.findall(r"\b(braid_\w+)\s*\(", text)) - inline)
        if "namespace braid {" not in text:
            continue
        cpp_names.update(re.findall(r"^(?:class|struct|enum class|enum)\s+(\w+)[^;{]*\{", text, re.M))
        cpp_names.update(re.findall(r"^(?!class |struct |enum |template|namespace|using |typedef |\})(?=[\w:\[])"
                                    r"[\w:<>,*&\[\] ]+?\b(\w+)\(", text, re.M))
    return c_functions, cpp_names


def check_exports(library, include_dir):
    raw = run(["nm", "-D", "--defined-only", library]).splitlines()
    demangled = run(["nm", "-D", "--defined-only", "-C", library]).splitlines()
    c_functions, cpp_names = public_declarations(include_dir)
    names = [line.split(" ", 2)[2] for line in demangled if line.count(" ") >= 2]
    problems = []
    for name in names:
        if re.fullmatch(r"braid_\w+", name):
            if name not in c_functions:
                problems.append(f"{name}: not declared in a public header")
            continue
        owner = next((name[len(p):] for p in OWNER_PREFIXES if name.startswith(p)), name)
        m = re.match(r"braid::(\w+)", owner)
        if not m or m.group(1) not in cpp_names:
            problems.append(f"{name}: not part of the public API")
            continue
        hidden = [t for t in re.findall(r"\bbraid::(\w+)", owner) if t not in cpp_names]
        if hidden:
            problems.append(f"{name}: names internal type(s) {', '.join(hidden)}")
    for name in names:
        for internal in INTERNAL:
            if re.search(re.escape(internal) + r"\b", name):
                problems.append(f"{name}: internal class {internal} exported")
    for name in REQUIRED:
        if name not in names:
            problems.append(f"{name}: public, but not exported")
    missing_c = sorted(c_functions - set(names))
    for name in missing_c:
        problems.append(f"{name}: declared in braid.h, not exported")
    if problems:
        problems = sorted(set(problems))
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        raise Failure(f"{library} exports the wrong symbols:\n  " + "\n  ".join(problems[:40]) + more)
    return len(raw)


def check_static_flags(env):
    """pkg-config --static names libraries and folders, never a file of the
    machine braid was built on (a path such as .../libcudart_static.a)."""
    flags = run(["pkg-config", "--static", "--libs", "braid"], env=env).split()
    files = [f for f in flags if not f.startswith("-") or (f.startswith("-l") and "/" in f)]
    if files:
        raise Failure(f"pkg-config --static --libs braid names files: {' '.join(files)} (in: {' '.join(flags)})")


def main():
    meson, build, source = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    python = sys.argv[4] if len(sys.argv) > 4 else ""
    for tool in ("pkg-config", "cmake", "nm", "make", "ninja", "cc", "c++", "ldd"):
        if not shutil.which(tool):
            print(f"skipped: {tool} not found (scripts/install-deps.sh installs it)")
            return SKIP
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="braid-packaging-") as tmp:
        tmp = Path(tmp)
        dest = tmp / "destdir"
        run([meson, "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        installed = time.monotonic()
        pcs = list(dest.rglob("pkgconfig/braid.pc"))
        if len(pcs) != 1:
            raise Failure(f"expected one installed braid.pc under {dest}, found {pcs}")
        pc_dir = pcs[0].parent
        lib_dir = pc_dir.parent
        env = dict(os.environ, PKG_CONFIG_PATH=f"{pc_dir}:{os.environ.get('PKG_CONFIG_PATH', '')}",
                   LD_LIBRARY_PATH=str(lib_dir), BRAID_TIMEOUT="20s")
        env.pop("PKG_CONFIG_LIBDIR", None)
        # A relocatable braid.pc (meson's pkgconfig.relocatable, the project's
        # default) finds its prefix from its own folder; one from a build
        # folder configured before that default takes the destdir as sysroot.
        if "${pcfiledir}" not in pcs[0].read_text():
            env["PKG_CONFIG_SYSROOT_DIR"] = str(dest)
        for f in ("libbraid.so", "libbraid.a"):
            if not (lib_dir / f).exists():
                raise Failure(f"{f} not installed in {lib_dir}")
        bin_dir = next(dest.rglob("bin/braid-run")).parent
        for tool in ("braid-run", "braid-perf", "braid-topo"):
            if not (bin_dir / tool).exists():
                raise Failure(f"{tool} not installed in {bin_dir}")
        # nccl-tests' names, links to braid-perf, which takes the collective from them.
        for alias in ("all_reduce_perf", "all_gather_perf", "alltoall_perf", "sendrecv_perf"):
            if not (bin_dir / alias).is_symlink() or os.readlink(bin_dir / alias) != "braid-perf":
                raise Failure(f"{alias} is not installed in {bin_dir} as a link to braid-perf")
        include_dir = next(dest.rglob("include/braid"))
        if not (include_dir / "braid.h").exists() or not (include_dir / "braid.hpp").exists():
            raise Failure(f"public headers not installed in {include_dir}")
        if not list(dest.rglob("doc/braid/LICENSE")):
            raise Failure("LICENSE not installed under share/doc/braid")

        exported = check_exports(lib_dir / "libbraid.so", include_dir)
        checked = time.monotonic()

        check_static_flags(env)
        example = tmp / "external"
        shutil.copytree(source / "examples" / "external", example)
        run(["make", "-C", example, "--no-print-directory"], env=env)
        run([meson, "setup", example / "build", example], env=env)
        run(["ninja", "-C", example / "build"], env=env)
        prefix = include_dir.parent.parent  # <prefix>/include/braid
        run(["cmake", "-S", example, "-B", example / "build-cmake", "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"],
            env=env)
        run(["cmake", "--build", example / "build-cmake"], env=env)
        built = time.monotonic()

        programs = [example / "all_reduce_cpp", example / "all_reduce_c", example / "all_reduce_c_static",
                    example / "build" / "all_reduce_cpp", example / "build" / "all_reduce_c",
                    example / "build-cmake" / "all_reduce_cpp", example / "build-cmake" / "all_reduce_c",
                    example / "build-cmake" / "all_reduce_c_static"]
        for program in programs:
            libs = run(["ldd", program], env=env)
            braid_line = next((line for line in libs.splitlines() if "libbraid" in line), None)
            if program.name.endswith("_static"):
                if braid_line:
                    raise Failure(f"{program} should hold libbraid.a, but loads {braid_line.strip()}")
            elif not braid_line or str(lib_dir) not in braid_line:
                raise Failure(f"{program} does not load the installed libbraid.so:\n{libs}")
            out = run([bin_dir / "braid-run", "-n", "2", "--timeout", "60s", program], env=env, timeout=90)
            good = [line for line in out.splitlines() if ", 0 wrong" in line]
            if len(good) != 2:
                raise Failure(f"{program} on 2 ranks:\n{out}")
        done = time.monotonic()
        python_result = check_python_package(python, meson, build, dest) if python else "no Python package built"
        imported = time.monotonic()
    print(f"installed in {installed - started:.1f} s; libbraid.so exports {exported} symbols, all public "
          f"(checked in {checked - installed:.1f} s); examples/external built in {built - checked:.1f} s; "
          f"{len(programs)} programs ran on 2 ranks in {done - built:.1f} s; {python_result} "
          f"({imported - done:.1f} s)")
    return 0


if __name__ == "__main__":
    exit_with(main)
