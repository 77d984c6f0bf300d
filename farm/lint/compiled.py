"""What the package compiles: the build files, the translation units, the headers they include.

A source tree is much more than its build: flash-attn's sdist carries all of CUTLASS (tests,
tools, examples, a second library under ``hopper/``), most of which nothing compiles. The lint
judges only what the build turns into device code, decided like this:

1. **Build root**: the recipe's ``build_subdir`` (default: the source root).
2. **Build files**: ``setup.py``, ``pyproject.toml``, ``setup.cfg``, ``CMakeLists.txt`` and
   ``Makefile`` at the build root; the Python modules beside ``setup.py`` that it imports (arch
   logic often lives there); the CMake files the root ``CMakeLists.txt`` reaches through
   ``include()`` and ``add_subdirectory()`` (not into vendored libraries, whose own tests and tools
   are not part of the package's targets). Build files elsewhere (``hopper/setup.py``, a vendored
   library's ``CMakeLists.txt``) belong to builds the recipe does not run, except the CMake
   project a Python build runs itself: when the Python build files mention cmake, the
   ``CMakeLists.txt`` of each directory they name (NATTEN's setup.py runs ``cmake csrc``).
3. **Translation units** (the seeds): every string in the Python build files, and every token in
   the CMake files and Makefiles, that names a ``.cu``/``.cpp``/``.cc``/``.cxx``/``.c`` file: as a
   path from the build root (or from the CMake file's directory), as a glob (``csrc/*.cu``; a bare
   ``*.cu`` is applied to every directory the build files name), or, when neither resolves (the
   path was assembled at run time), as a path suffix. Paths a Python build joins from constants
   (``os.path.join(ext_dir, "csrc", "*.cu")``) are folded; other run-time values and CMake
   variables are not evaluated: the suffix match is what keeps that sound. Branches of ``setup.py`` taken
   only by ROCm/HIP builds (``if IS_ROCM:``) are skipped: the farm builds CUDA.
4. **Fallback, fail closed**: when the build files name no translation unit at all (a JIT package, a
   build driven by code the lint cannot read), every translation unit under the build root is a
   seed, except those under test/example/benchmark/tool/doc directories and vendored libraries.
5. **Headers**: the ``#include`` graph from the seeds. ``"x.h"`` resolves beside the including file
   first; otherwise (and for ``<x/y.h>``) any file in the tree whose path ends with the include
   path, preferring the candidates closest to the including file. Unresolved includes (the
   toolkit, torch, the standard library) are outside the tree and not linted.

A **vendored library** is a directory below the build root that is a git submodule, carries its
own build file and licence, has a project layout of its own (an ``include/`` beside its own
test/tool/example directories or its licence, as sdists ship submodules such as ``csrc/cutlass``),
or sits in a ``third_party/`` (``extern/``, ``vendor/``, ...) directory. Its headers are compiled when included, but its
gated code becomes device code only where the package instantiates it; the rules treat such files
as library code (see :mod:`farm.lint.rules`).
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from farm.fsutil import walk_files
from farm.lint.families import CMAKE_TOKEN, is_pattern
from farm.lint.lexer import first_on_line, strip_hash_comments
from farm.lint.stamps import Stamps

SOURCE_EXTS = (".cu", ".cpp", ".cc", ".cxx", ".c")
HEADER_EXTS = (".h", ".hpp", ".cuh", ".hh", ".hxx", ".inl", ".inc", ".tcc", ".ipp", ".cuinl")
CODE_EXTS = SOURCE_EXTS + HEADER_EXTS
ROOT_BUILD_FILES = ("setup.py", "pyproject.toml", "setup.cfg", "CMakeLists.txt", "Makefile", "makefile",
                    "GNUmakefile")
# Directories whose sources are not part of a package's build unless a build file names them.
NOT_SHIPPED = frozenset({"test", "tests", "testing", "unittest", "unittests", "example", "examples",
                         "benchmark", "benchmarks", "bench", "tools", "tool", "docs", "doc", "scripts",
                         "samples", "sample", "demo", "demos"})
# Directories whose subdirectories are, by convention, vendored projects.
VENDOR_PARENTS = frozenset({"third_party", "third-party", "thirdparty", "3rdparty", "external", "externals",
                            "extern", "vendor", "vendored", "submodules"})
_LICENSE = re.compile(r"^(licen[cs]e|copying)", re.IGNORECASE)
_INCLUDE = re.compile(r'#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]')  # first on its line (first_on_line)
_CMAKE_VARS = re.compile(r"\$\{(CMAKE_CURRENT_SOURCE_DIR|CMAKE_CURRENT_LIST_DIR|PROJECT_SOURCE_DIR|"
                         r"CMAKE_SOURCE_DIR|CMAKE_HOME_DIRECTORY)\}/?")


def kind_of_build_file(relpath: str) -> str | None:
    """'python', 'cmake', 'make' or 'toml' for a build file name, else None."""
    name = posixpath.basename(relpath)
    if name.endswith(".py"):
        return "python"
    if name == "CMakeLists.txt" or name.endswith(".cmake"):
        return "cmake"
    if name in ("Makefile", "makefile", "GNUmakefile") or name.endswith(".mk"):
        return "make"
    if name.endswith((".toml", ".cfg")):
        return "toml"
    return None


@dataclass(frozen=True)
class BuildScope:
    """The part of a source tree the build compiles, and how that was decided."""

    build_root: str
    build_files: tuple[str, ...]
    seeds: tuple[str, ...]
    compiled: frozenset[str]
    vendored: tuple[str, ...]  # directories of vendored libraries
    how: str
    files_total: int

    def library_of(self, relpath: str) -> str | None:
        """The vendored library directory holding ``relpath``, if any."""
        return next((lib for lib in self.vendored if relpath.startswith(lib + "/")), None)


class TreeIndex:
    """All files of a tree by relative posix path, with a basename index and a text cache.

    ``stamps`` records what the lint's answer is made from, each taken before it was read: every
    directory listed and every file read (:mod:`farm.lint.stamps`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # walk_files' strings, never made Paths: a Path per file costs more than the rest of the index
        top = self._top = os.fspath(root)
        self.stamps = Stamps(os.path.abspath(top))
        prefix: dict[str, str] = {}  # directory -> its relative posix path + "/" ("" for the root)
        below = len(top if top.endswith(os.sep) else top + os.sep)

        def listed(directory: str, st: os.stat_result) -> None:
            rel = prefix[directory] = directory[below:].replace(os.sep, "/") + "/" if directory != top else ""
            self.stamps.add(rel or ".", st)

        self.files: list[str] = []
        self.by_name: dict[str, list[str]] = {}
        self.names_by_dir: dict[str, set[str]] = {}  # directory -> the names of the files right in it
        self.dirs: set[str] = {""}  # every directory holding a file, at any depth
        directory, base, names = None, "", set()
        for d, n in walk_files(top, on_dir=listed):
            if d != directory:  # a directory's files come together
                directory, base = d, prefix[d]
                names = self.names_by_dir[base[:-1]] = set()
                parent = base[:-1]
                while parent not in self.dirs:
                    self.dirs.add(parent)
                    parent = posixpath.dirname(parent)
            rel = base + n
            self.files.append(rel)
            self.by_name.setdefault(n, []).append(rel)
            names.add(n)
        self.fileset = frozenset(self.files)
        self._text: dict[str, str] = {}

    def text(self, rel: str) -> str:
        cached = self._text.get(rel)
        if cached is None:
            try:
                with open(os.path.join(self._top, rel), encoding="utf-8", errors="replace") as fh:
                    self.stamps.add(rel, os.fstat(fh.fileno()))
                    cached = fh.read()
            except OSError:
                self.stamps.add_path(rel)
                cached = ""
            self._text[rel] = cached
        return cached

    def by_suffix(self, suffix: str, under: str = "") -> list[str]:
        suffix = suffix.lstrip("/")
        name = posixpath.basename(suffix)
        return [p for p in self.by_name.get(name, ())
                if (p == suffix or p.endswith("/" + suffix)) and _under(p, under)]

    def glob(self, pattern: str) -> list[str]:
        """Files matching a shell glob as Python's glob and CMake read it: ``*`` stays in one
        directory, ``**`` crosses directories."""
        regex = re.compile(_GLOB_TOKEN.sub(_glob_token, pattern))
        return [p for p in self.files if regex.fullmatch(p)]


_WILDCARDS = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
_GLOB_TOKEN = re.compile(r"\*\*/|\*\*|\*|\?|\[[^\]]*\]|.", re.DOTALL)  # a "[" never closed is itself


def _glob_token(m: re.Match[str]) -> str:
    token = m[0]
    if token in _WILDCARDS:
        return _WILDCARDS[token]
    if len(token) > 1:  # [class], [!negated]
        body = token[1:-1].replace("\\", "\\\\")
        return "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
    return re.escape(token)


def _under(path: str, directory: str) -> bool:
    return not directory or path.startswith(directory + "/")


def _join(base: str, rel: str) -> str:
    joined = posixpath.normpath(posixpath.join(base, rel)) if base else posixpath.normpath(rel)
    return "" if joined == "." else joined


def _not_shipped(rel: str) -> bool:
    return any(part.lower() in NOT_SHIPPED for part in rel.split("/")[:-1])


def vendored_dirs(index: TreeIndex, build_root: str) -> tuple[str, ...]:
    """Directories below the build root that are separate projects (submodules, own build + licence)."""
    found: set[str] = set()
    gitmodules = _join(build_root, ".gitmodules")
    if gitmodules in index.fileset:
        for m in re.finditer(r"^\s*path\s*=\s*(\S+)", index.text(gitmodules), re.MULTILINE):
            found.add(_join(build_root, m[1]))
    names_by_dir = index.names_by_dir
    subdirs: dict[str, set[str]] = {}
    for directory in index.dirs:
        if directory:
            subdirs.setdefault(posixpath.dirname(directory), set()).add(posixpath.basename(directory))
    for directory in set(names_by_dir) | set(subdirs):
        if directory in ("", build_root) or not _under(directory, build_root):
            continue
        names = names_by_dir.get(directory, set())
        children = {c.lower() for c in subdirs.get(directory, set())}
        has_build = bool(names & {"CMakeLists.txt", "setup.py", "pyproject.toml", "Makefile", "meson.build"})
        licensed = any(_LICENSE.match(n) for n in names)
        own_project = has_build and licensed
        # An include/ beside its own tests, tools or licence: sdists ship submodules without their
        # build files (NATTEN's third_party/cutlass is include/ and LICENSE.txt only).
        own_layout = "include" in children and (licensed or bool(children & NOT_SHIPPED))
        # A directory in third_party/ (extern/, vendor/, ...) is someone else's project by convention.
        conventional = posixpath.basename(posixpath.dirname(directory)).lower() in VENDOR_PARENTS
        if own_project or own_layout or conventional:
            found.add(directory)
    # Keep the outermost: a library's own vendored dependencies belong to it.
    ordered = sorted(found, key=len)
    out: list[str] = []
    for d in ordered:
        if not any(d.startswith(o + "/") for o in out):
            out.append(d)
    return tuple(out)


_ROCM = re.compile(r"rocm|hip", re.IGNORECASE)


_JOINS = frozenset({"join", "Path", "PurePath", "PosixPath"})


class _StringCollector(ast.NodeVisitor):
    """String constants of a build script, skipping branches that only a ROCm/HIP build takes.

    Paths the script assembles from constants are folded too: ``os.path.join(ext_dir, "csrc",
    "*.cu")`` with ``ext_dir = os.path.join("pkg", "cuda")`` yields ``pkg/cuda/csrc/*.cu``. Leading
    parts that are not constants (``this_dir``, ``Path(__file__).parent``) are taken as the script's
    own directory, which is what such scripts join onto."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.names: dict[str, str] = {}

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.strings.append(node.value)

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self._fold(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if value is None:
                    self.names.pop(target.id, None)
                else:
                    self.names[target.id] = value
        self.generic_visit(node)

    def _composite(self, node: ast.AST) -> None:
        folded = self._fold(node)
        if folded is not None:
            self.strings.append(folded)
        self.generic_visit(node)

    visit_Call = visit_BinOp = visit_JoinedStr = _composite

    def _fold(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.JoinedStr):
            parts = [self._fold(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
            return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
            parts = [self._fold(node.left), self._fold(node.right)]
            if isinstance(node.op, ast.Add):
                return None if None in parts else "".join(p for p in parts if p is not None)
            return self._join(parts)
        if isinstance(node, ast.Call) and not node.keywords:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _JOINS and node.args:
                return self._join([self._fold(a) for a in node.args])
        return None

    @staticmethod
    def _join(parts: list[str | None]) -> str | None:
        known: list[str] = []
        for part in parts:
            if part is None:
                if known:
                    return None  # an unknown part in the middle: nothing sound to say
                continue
            known.append(part)
        return posixpath.join(*known) if known else None

    def visit_If(self, node: ast.If) -> None:
        text = ast.unparse(node.test)
        rocm = bool(_ROCM.search(text))
        negated = bool(re.search(r"\bnot\s+[\w.]*(rocm|hip)", text, re.IGNORECASE))
        self.visit(node.test)
        if not (rocm and not negated):
            for stmt in node.body:
                self.visit(stmt)
        if not (rocm and negated):
            for stmt in node.orelse:
                self.visit(stmt)


def _python_strings(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return re.findall(r"""["']([^"'\n]+)["']""", text)
    collector = _StringCollector()
    collector.visit(tree)
    return collector.strings


_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.MULTILINE)


class _Collector:
    def __init__(self, index: TreeIndex, build_root: str, vendored: tuple[str, ...]) -> None:
        self.index = index
        self.build_root = build_root
        self.vendored = vendored
        self.build_files: list[str] = []
        self.seeds: set[str] = set()
        self.dirs_named: set[str] = {build_root}
        self.bare_globs: set[str] = set()

    def add_build_file(self, rel: str) -> bool:
        if rel in self.build_files or rel not in self.index.fileset:
            return False
        self.build_files.append(rel)
        return True

    def resolve(self, token: str, base: str) -> None:
        token = token.strip().removeprefix("./")
        if not token or len(token) > 300:
            return
        if is_pattern(token):
            if not token.lower().endswith(CODE_EXTS) and not token.endswith("*"):
                return
            if "/" not in token:
                self.bare_globs.add(token)
                return
            self.seeds.update(rel for rel in self.index.glob(_join(base, token)) if rel.endswith(SOURCE_EXTS))
            return
        rel = _join(base, token)
        if token.endswith(SOURCE_EXTS):
            if rel in self.index.fileset:
                self.seeds.add(rel)
            else:
                self.seeds.update(p for p in self.index.by_suffix(token, self.build_root) if p.endswith(SOURCE_EXTS))
        elif rel in self.index.dirs:
            self.dirs_named.add(rel)

    def python(self, rel: str) -> None:
        text = self.index.text(rel)
        base = posixpath.dirname(rel)
        for s in _python_strings(text):
            self.resolve(s, base)
        for module in [(a or b).split(".")[0] for a, b in _IMPORT.findall(text)]:
            helper = _join(base, module + ".py")
            if self.add_build_file(helper):
                self.python(helper)

    def cmake(self, rel: str) -> None:
        text = strip_hash_comments(self.index.text(rel))
        base = posixpath.dirname(rel)
        for m in re.finditer(r"\badd_subdirectory\s*\(\s*\"?([^\s)\"]+)", text, re.IGNORECASE):
            sub = _join(base, _CMAKE_VARS.sub("", m[1]))
            if any(sub == v or _under(sub, v) for v in self.vendored):
                continue
            child = _join(sub, "CMakeLists.txt")
            if self.add_build_file(child):
                self.cmake(child)
        for m in re.finditer(r"\binclude\s*\(\s*\"?([^\s)\"]+)", text, re.IGNORECASE):
            target = _CMAKE_VARS.sub("", m[1])
            for candidate in (_join(base, target), _join(base, target + ".cmake")):
                if candidate.endswith(".cmake") and self.add_build_file(candidate):
                    self.cmake(candidate)
        for token in CMAKE_TOKEN.findall(_CMAKE_VARS.sub("", text)):
            if "${" in token:
                tail = token.rsplit("}", 1)[-1].lstrip("/")
                if tail.endswith(SOURCE_EXTS):
                    self.seeds.update(p for p in self.index.by_suffix(tail, self.build_root)
                                      if p.endswith(SOURCE_EXTS))
                continue
            self.resolve(token, base)

    def cmake_projects(self) -> None:
        """The CMake projects a Python build runs (``cmake csrc`` from setup.py): the
        ``CMakeLists.txt`` of each directory the Python build files name, when they mention cmake."""
        python = [rel for rel in self.build_files if kind_of_build_file(rel) == "python"]
        if not any(re.search(r"\bcmake\b", self.index.text(rel), re.IGNORECASE) for rel in python):
            return
        for directory in sorted(self.dirs_named):
            if any(directory == v or _under(directory, v) for v in self.vendored):
                continue
            child = _join(directory, "CMakeLists.txt")
            if self.add_build_file(child):
                self.cmake(child)

    def make(self, rel: str) -> None:
        text = strip_hash_comments(self.index.text(rel))
        base = posixpath.dirname(rel)
        for m in re.finditer(r"\$\(wildcard\s+([^)]+)\)", text):
            for pattern in m[1].split():
                self.resolve(pattern, base)
        for token in re.findall(r"[^\s=:\\$()]+", text):
            if token.endswith(SOURCE_EXTS):
                self.resolve(token, base)


def extension_sources(index: TreeIndex, scope: BuildScope) -> dict[str, tuple[str, ...]]:
    """The translation units of each extension a Python build file names:
    ``CUDAExtension(name="pkg._ext", sources=["csrc/a.cu", ...])`` (any ``*Extension`` call, the
    name and sources as keywords or the first two arguments). Sources the script computes at run
    time are not followed: those units keep the package's list."""
    out: dict[str, set[str]] = {}
    for rel in scope.build_files:
        if kind_of_build_file(rel) != "python":
            continue
        try:
            tree = ast.parse(index.text(rel))
        except SyntaxError:
            continue
        folder = _StringCollector()
        folder.visit(tree)  # the names the script binds to constant paths
        base = posixpath.dirname(rel)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if not called.endswith("Extension"):
                continue
            args = {k.arg: k.value for k in node.keywords if k.arg}
            name_node = args.get("name", node.args[0] if node.args else None)
            sources_node = args.get("sources", node.args[1] if len(node.args) > 1 else None)
            name = folder._fold(name_node) if name_node is not None else None
            if not name or sources_node is None:
                continue
            collector = _Collector(index, scope.build_root, scope.vendored)
            for sub in ast.walk(sources_node):
                value = folder._fold(sub) if isinstance(sub, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.Call)) \
                    else None
                if value:
                    collector.resolve(value, base)
            out.setdefault(name, set()).update(s for s in collector.seeds if s in scope.seeds)
    return {name: tuple(sorted(seeds)) for name, seeds in out.items() if seeds}


def build_scope(index: TreeIndex, build_subdir: str | None = None) -> BuildScope:
    """Decide what is compiled (see the module docstring)."""
    build_root = _join("", build_subdir) if build_subdir else ""
    vendored = vendored_dirs(index, build_root)
    collector = _Collector(index, build_root, vendored)
    readers = {"python": collector.python, "cmake": collector.cmake, "make": collector.make}
    for name in ROOT_BUILD_FILES:
        rel = _join(build_root, name)
        reader = readers.get(kind_of_build_file(rel) or "")
        if collector.add_build_file(rel) and reader is not None:
            reader(rel)
    collector.cmake_projects()
    for pattern in collector.bare_globs:
        for directory in collector.dirs_named:
            collector.seeds.update(rel for rel in index.glob(_join(directory, pattern)) if rel.endswith(SOURCE_EXTS))
    seeds = {s for s in collector.seeds if _under(s, build_root)}
    if seeds:
        how = f"translation units named by {', '.join(collector.build_files)}"
    else:
        seeds = {
            rel for rel in index.files
            if rel.endswith(SOURCE_EXTS) and _under(rel, build_root) and not _not_shipped(rel[len(build_root):])
            and not any(_under(rel, v) for v in vendored)
        }
        how = ("no build file names a translation unit: every source under the build root outside "
               "test/example/benchmark/tool directories and vendored libraries")
    compiled = include_closure(index, sorted(seeds))
    return BuildScope(build_root, tuple(collector.build_files), tuple(sorted(seeds)), frozenset(compiled),
                      vendored, how, len(index.files))


def resolve_include(index: TreeIndex, including: str, target: str) -> list[str]:
    """Files in the tree an ``#include`` of ``target`` from ``including`` can mean."""
    here = posixpath.dirname(including)
    direct = _join(here, target)
    if direct in index.fileset:
        return [direct]
    matches = index.by_suffix(target)
    if len(matches) <= 1:
        return matches
    # Include directories are almost always ancestors of the including file: prefer the closest.
    def shared(path: str) -> int:
        # element-wise over the lists of components, so it counts whole directories
        return len(os.path.commonprefix([path.split("/"), including.split("/")]))  # noqa: RUF071
    best = max(shared(m) for m in matches)
    return [m for m in matches if shared(m) == best]


def include_closure(index: TreeIndex, seeds: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    queue = deque(seeds)
    while queue:
        rel = queue.popleft()
        if rel in seen:
            continue
        seen.add(rel)
        text = index.text(rel)
        if "include" not in text:
            continue
        for m in _INCLUDE.finditer(text):
            if not first_on_line(text, m.start()):
                continue
            for found in resolve_include(index, rel, m[1].strip()):
                if found not in seen:
                    queue.append(found)
    return seen
