"""Where `meson install` puts the package braid, for this interpreter and a prefix.

    python3 -E -s package_install_dir.py PREFIX LIBDIR

Prints three lines:
  1. the package folder's parent (a site-packages folder), relative to PREFIX
     when it lies under it;
  2. the install_rpath of the package's extensions: $ORIGIN and the way from
     PREFIX/<line 1>/braid to LIBDIR (LIBDIR as Meson's option: relative to
     PREFIX, or absolute), so the installed extensions find libbraid.so
     without LD_LIBRARY_PATH or ldconfig, and a --destdir copy finds the
     copy's own;
  3. "yes" when the folder is on the interpreter's own sys.path (so `import
     braid` works after the install with no PYTHONPATH), else "no".

The folder is the interpreter's own site-packages folder for PREFIX: the
first of the following that lies under PREFIX and is on sys.path:
  - Debian's deb_system scheme with PREFIX (prefix /usr: /usr/lib/python3/dist-packages);
  - the interpreter's default scheme (Debian: posix_local, whose folder is
    /usr/local/lib/python3.X/dist-packages; in a venv: the venv's);
  - the posix_prefix and default schemes with PREFIX (other distributions).
With none on sys.path (a prefix such as /opt/braid) it is posix_prefix's
folder under PREFIX (lib/python3.X/site-packages), which PYTHONPATH must name.
Meson's own choice (python.install_env=prefix) on Debian is
PREFIX/lib/python3/dist-packages, which Python reads for /usr only.

Run with -E -s, so that PYTHONPATH and the user's site-packages do not count
as the interpreter's own path.
"""

import os
import sys
import sysconfig


def site_packages(prefix):
    on_path = {os.path.normpath(p) for p in sys.path if p}
    with_prefix = {"base": prefix, "platbase": prefix, "installed_base": prefix, "installed_platbase": prefix}
    default = sysconfig.get_default_scheme()
    schemes = sysconfig.get_scheme_names()
    candidates = []
    if "deb_system" in schemes:
        candidates.append(sysconfig.get_path("platlib", "deb_system", vars=with_prefix))
    candidates.append(sysconfig.get_path("platlib", default))
    candidates.append(sysconfig.get_path("platlib", "posix_prefix", vars=with_prefix))
    candidates.append(sysconfig.get_path("platlib", default, vars=with_prefix))
    for path in candidates:
        path = os.path.normpath(path)
        if path.startswith(prefix.rstrip("/") + "/") and path in on_path:
            return path, True
    return os.path.normpath(sysconfig.get_path("platlib", "posix_prefix", vars=with_prefix)), False


def main():
    prefix, libdir = os.path.normpath(sys.argv[1]), sys.argv[2]
    path, importable = site_packages(prefix)
    package = os.path.join(path, "braid")
    libdir = libdir if os.path.isabs(libdir) else os.path.join(prefix, libdir)
    print(os.path.relpath(path, prefix) if path.startswith(prefix.rstrip("/") + "/") else path)
    print("$ORIGIN/" + os.path.relpath(libdir, package))
    print("yes" if importable else "no")


if __name__ == "__main__":
    main()
