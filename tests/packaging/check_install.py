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

Exits 77 (skipped) when pkg-config, cmake, nm, make, ninja or a compiler is missing.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
OWNER_PREFIXES = ("typeinfo for ", "typeinfo name for ", "vtable for ")
# Internal classes that must never be exported (a sample, on top of the rule).
INTERNAL = ("braid::CommImpl", "braid::TcpTransport", "braid::ShmTransport", "braid::Operation", "braid::Executor",
            "braid::Settings", "braid::Plan", "braid::Poller", "braid::TcpStoreServer")
REQUIRED = ("braid_all_reduce", "braid_comm_init_env", "braid_get_version", "braid_last_error",
            "braid::Comm::all_reduce(void const*, void*, unsigned long, braid::DataType, braid::ReduceOp)",
            "braid::Comm::from_env(braid::CommOptions const&)", "typeinfo for braid::Error",
            "typeinfo for braid::InvalidArgument", "typeinfo for braid::Timeout", "vtable for braid::Error")


class Failure(Exception):
    pass


def run(cmd, timeout=120, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if proc.returncode != 0:
        raise Failure(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


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
    print(f"installed in {installed - started:.1f} s; libbraid.so exports {exported} symbols, all public "
          f"(checked in {checked - installed:.1f} s); examples/external built in {built - checked:.1f} s; "
          f"{len(programs)} programs ran on 2 ranks in {done - built:.1f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
