#!/usr/bin/python3
"""Writes libbraid.so's GNU ld version script: the public API and nothing else.

    libbraid_exports.py OUTPUT DEPFILE NM --headers HEADER... --libs STATIC_LIB...

The public API is what the public headers declare:
  - C functions named braid_* that a header declares (braid.h);
  - in namespace braid itself (not braid::detail, not braid::mirrored, which
    is a library of its own): the classes and structs defined there with a
    body, with all their members, typeinfo and vtables (so that a program
    linking the shared library catches braid::Error and its subclasses thrown
    inside it), the enums, and the functions declared there.
The script reads the symbols that the static layers define (nm -C) and
exports those that belong to that API: a symbol of a public class or of a
public function, whose every braid:: type is public too. So
name_of(braid::DataType) is exported and an internal name_of(braid::MemKind)
is not, nor a private constructor taking a std::unique_ptr<braid::CommImpl>;
CommImpl, the transports, the collectives and core stay local. The script
lists the names exactly (quoted, demangled), one per line.

So a new public function, class or member needs no edit here: declare it in
a public header (one that src/meson.build lists, or one they include)
and define it in a layer; the next build exports it. The depfile names every
header read, so editing one regenerates the script.
"""

import re
import subprocess
import sys
from pathlib import Path

KEYWORDS = {"class", "struct", "union", "enum", "namespace", "using", "typedef", "static_assert", "friend",
            "template", "inline", "constexpr", "const", "static", "extern", "virtual", "explicit", "noexcept",
            "return", "operator", "sizeof", "decltype", "alignas", "requires"}


def strip_comments_and_preprocessor(text):
    """The header without comments, string literals and # lines (their braces would mislead the scan)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return "\n".join("" if line.lstrip().startswith("#") else line for line in text.splitlines())


def matching_brace(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise SystemExit(f"libbraid_exports: unbalanced braces after offset {open_at}")


def function_name(statement):
    """The name of the function a namespace-level declaration declares, or None."""
    head = statement.split("(", 1)[0] if "(" in statement else None
    if head is None or "=" in head:
        return None
    m = re.search(r"(operator\s*\S+|~?\w+)\s*$", head)
    if not m or m.group(1) in KEYWORDS:
        return None
    return re.sub(r"\s+", "", m.group(1))


def scan_namespace(body, classes, templates, enums, functions):
    """Records the classes and functions declared at the top level of one `namespace braid { body }`."""
    i, start = 0, 0
    while i < len(body):
        c = body[i]
        if c == "{":
            statement = " ".join(body[start:i].split())
            close = matching_brace(body, i)
            enum = re.match(r"enum\s+(?:class\s+|struct\s+)?(\w+)", statement)
            if enum:
                enums.add(enum.group(1))
            elif statement.startswith("namespace"):
                pass  # braid::detail and the like are not public
            else:
                m = re.search(r"\b(class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?(\w+)\s*(<[^{]*>)?\s*(?:final\s*)?(?::[^{]*)?$",
                              statement)
                if m:
                    (templates if statement.startswith("template") or m.group(3) else classes).add(m.group(2))
                elif not re.match(r"(enum|template\s*<[^>]*>\s*(class|struct))\b", statement):
                    name = function_name(statement)
                    if name:
                        functions.add(name)
            i = close + 1
            # a class definition ends with ';', a function body does not
            start = i
            continue
        if c == ";":
            statement = " ".join(body[start:i].split())
            first = statement.split(" ", 1)[0] if statement else ""
            alias = re.match(r"using\s+(\w+)\s*=", statement)
            if alias:
                enums.add(alias.group(1))
            if first not in ("using", "typedef", "static_assert", "namespace", "class", "struct", "union", "enum") \
                    and not re.match(r"template\s*<[^>]*>\s*(class|struct|union)\b", statement):
                name = function_name(statement)
                if name:
                    functions.add(name)
            start = i + 1
        i += 1


def with_included(headers):
    """The headers and the public headers they include ("braid/x.hpp"), transitively;
    braid/mirrored* belongs to libbraid_mirrored."""
    found, todo = [], [Path(h).resolve() for h in headers]
    while todo:
        header = todo.pop(0)
        if header in found:
            continue
        found.append(header)
        for name in re.findall(r'^\s*#\s*include\s*[<"]braid/([\w./]+)[>"]', header.read_text(), re.M):
            if not name.startswith("mirrored"):
                todo.append(header.parent / name)
    return found


def public_names(headers):
    classes, templates, enums, functions = set(), set(), set(), set()
    for header in headers:
        text = strip_comments_and_preprocessor(Path(header).read_text())
        for m in re.finditer(r"\bnamespace\s+braid\s*\{", text):
            open_at = m.end() - 1
            scan_namespace(text[open_at + 1:matching_brace(text, open_at)], classes, templates, enums, functions)
    return classes | templates, enums, functions


C_FUNCTION = re.compile(r"\b(braid_\w+)\s*\(")
OWNER_PREFIXES = ("typeinfo for ", "typeinfo name for ", "vtable for ")
GLOBAL_TYPES = set("TDBRVWGSiu")  # nm's letters for defined global symbols


def defined_symbols(nm, libraries):
    """The demangled names of the global symbols the static libraries define."""
    names = set()
    for library in libraries:
        out = subprocess.run([nm, "-C", "--defined-only", library], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and len(parts[1]) == 1 and parts[1] in GLOBAL_TYPES:
                names.add(parts[2])
    return names


def is_public(symbol, classes, types, functions):
    """True for a symbol of the public C++ API (see the module's comment)."""
    for prefix in OWNER_PREFIXES:
        if symbol.startswith(prefix):
            symbol = symbol[len(prefix):]
            break
    m = re.match(r"braid::(\w+)(.?)", symbol)
    if m and m.group(1) == "operator":
        m = next((re.match(rf"braid::({re.escape(f)})(\()", symbol) for f in functions
                  if f.startswith("operator") and symbol.startswith(f"braid::{f}(")), None)
    if not m:
        return False
    owner, after = m.group(1), m.group(2)
    if owner in classes:
        ok = after in ("", ":", "<")
    else:
        ok = owner in functions and after in ("(", "<", "[")
    return ok and all(t in types for t in re.findall(r"\bbraid::(\w+)", symbol[m.end():]))


def main():
    args = sys.argv[1:]
    if len(args) < 5 or "--headers" not in args or "--libs" not in args:
        raise SystemExit(__doc__)
    output, depfile, nm = args[0], args[1], args[2]
    headers = with_included(args[args.index("--headers") + 1:args.index("--libs")])
    libraries = args[args.index("--libs") + 1:]
    classes, enums, functions = public_names(headers)
    c_functions = set()
    for header in headers:
        c_functions.update(C_FUNCTION.findall(strip_comments_and_preprocessor(Path(header).read_text())))
    symbols = defined_symbols(nm, libraries)
    c_exports = sorted(s for s in symbols if s in c_functions)
    cpp_exports = sorted(s for s in symbols if is_public(s, classes, classes | enums, functions))
    lines = ["/* Generated by src/libbraid_exports.py from the public headers and the", 
             "   symbols of the static layers: do not edit. */",
             "{", "  global:"]
    lines += [f"    {name};" for name in c_exports]
    lines.append('    extern "C++" {')
    lines += [f'      "{name}";' for name in cpp_exports]
    lines += ["    };", "  local:", "    *;", "};", ""]
    Path(output).write_text("\n".join(lines))
    Path(depfile).write_text(f"{output}: " + " ".join(str(h) for h in headers) + "\n")


if __name__ == "__main__":
    main()
