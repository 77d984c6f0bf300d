"""Kernel families: sources a CMake build compiles for its own subset of the requested list.

vLLM (and projects that copied its ``cmake/utils.cmake``) strips torch's arch flags and gives each
kernel family its own targets: ``cuda_archs_loose_intersection(OUT "9.0a;" "${CUDA_ARCHS}")`` keeps
the family's supported arches that the list asks for (9.0 in the list builds 9.0a, 12.0f builds
for any 12.x asked for, ``+PTX`` adds that arch's PTX), and ``set_gencode_flags_for_srcs(SRCS ...
CUDA_ARCHS "${OUT}")`` gives exactly those targets to the family's sources; ``CUDA_ARCHS`` itself
is the list without ``+PTX``, intersected with ``CUDA_SUPPORTED_ARCHS``. Which branch of an
``if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.9)`` is taken depends on the CUDA line.

This reads those CMake files as CMake would for one cell (its list and CUDA line), far enough to
know each family: ``set``/``list(APPEND|REMOVE_ITEM)``, ``if``/``elseif``/``else`` on versions,
strings and defined variables, ``include`` of the tree's own ``.cmake`` files, ``file(GLOB)``
and ``file(GLOB_RECURSE)``, and the two helper calls. Function and macro bodies and loops are not
run; a variable the reader does not know is undefined (false), like an unset option. Pure: text
in, families out.

A glob is kept as its pattern (from the CMake source dir, ``**/`` for a recursive one), not as
the files it matches: vLLM writes its Machete and Marlin kernels at configure time and globs
them, so the files the build compiles need not be in the tree that is read.
"""

from __future__ import annotations

import operator
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass

from farm.model.arch import ArchList, Kind, Target, Variant

# CMake's false constants (``if(<constant>)``).
_FALSE = frozenset({"", "0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND"})
_COMPARE = {"EQUAL": operator.eq, "LESS": operator.lt, "GREATER": operator.gt, "LESS_EQUAL": operator.le,
            "GREATER_EQUAL": operator.ge}
_VERSION_OPS = {f"VERSION_{name}": compare for name, compare in _COMPARE.items()}
CMAKE_TOKEN = re.compile(r'[^\s()"]+')  # an unquoted argument
_COMMAND = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_MAX_COMMANDS = 200_000  # a bound on what one configure reads, however the files include each other
_BLOCKS = ("function", "macro", "foreach", "while")  # bodies the reader does not run


@dataclass(frozen=True)
class Family:
    """One ``set_gencode_flags_for_srcs`` call as the cell configures it."""

    name: str  # the variable that holds its arches, e.g. SCALED_MM_ARCHS (CUDA_ARCHS: the default set)
    where: str  # file:line of the call
    supported: str  # what was intersected, as written: "9.0a;" (empty for CUDA_ARCHS)
    archs: tuple[str, ...]  # what it resolved to for the cell: ("9.0a",), ("8.0+PTX", "12.0f")
    sources: tuple[str, ...]  # paths from the source root
    # globs from the source root (file(GLOB) in SRCS): files the build may write before it compiles
    patterns: tuple[str, ...] = ()

    @property
    def targets(self) -> ArchList:
        return ArchList.of(target for arch in self.archs for target in _targets(arch))


def _targets(arch: str) -> list[Target]:
    m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", arch)
    if m is None:
        return []
    sass = Target(int(m[1]), int(m[2]), Variant(m[3]))
    return [sass, sass.with_kind(Kind.PTX)] if m[4] else [sass]


def version_key(text: str) -> tuple[int, ...]:
    """``12.9`` -> (12, 9): versions compared as CMake's VERSION_LESS does."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:4]) or (0,)

_GLOB_CHARS = frozenset("*?[")
# variables a glob is written from that name the source dir: the reader leaves them empty
_SOURCE_DIRS = ("${CMAKE_CURRENT_SOURCE_DIR}/", "${CMAKE_SOURCE_DIR}/", "${PROJECT_SOURCE_DIR}/")


def is_pattern(path: str) -> bool:
    """Whether a path is a glob (a family's ``file(GLOB)`` source, a build file's ``csrc/*.cu``)."""
    return not _GLOB_CHARS.isdisjoint(path)


def loose_intersection(src: list[str], tgt: list[str]) -> list[str]:
    """vLLM's ``cuda_archs_loose_intersection`` (cmake/utils.cmake): the arches of ``src`` that
    ``tgt`` asks for, keeping ``+PTX`` requests, ``a``/``f`` suffixes matched across suffixes
    and an ``f`` family by major version, plain arches matched by the highest ``src`` arch at or
    below each target of the same major (or any major, for a ``+PTX`` source)."""
    ptx = list(dict.fromkeys(a.removesuffix("+PTX") for a in src if a.endswith("+PTX")))
    source = list(dict.fromkeys(a.removesuffix("+PTX") for a in src if a))
    target = [a for a in tgt if a]
    out: list[str] = []
    for arch in list(source):  # exact base match first: 9.0a in src, 9.0 in tgt
        if arch[-1] in "af" and arch[:-1] in target:
            source.remove(arch)
            target.remove(arch[:-1])
            out.append(arch)
    for arch in list(source):
        if arch[-1] not in "af":
            continue
        source.remove(arch)
        base = arch[:-1]
        match = next((base + suffix for suffix in "af" if base + suffix in target), None)
        if match is None and arch.endswith("f"):
            major = base.split(".")[0]
            match = next((t for t in target if t.rstrip("af").split(".")[0] == major), None)
        if match is not None:
            target.remove(match)
            out.append(match)
    for t in list(target):  # a suffixed target asked for by a plain source arch keeps its suffix
        if t[-1] in "af" and t[:-1] in source:
            target.remove(t)
            source.remove(t[:-1])
            out.append(t)
    source.sort(key=version_key)
    for t in target:  # the highest source arch at or below it, of its major unless PTX
        fits = [s for s in source if version_key(s) <= version_key(t.rstrip("af"))
                and (s in ptx or s.split(".")[0] == t.split(".")[0])]
        if fits:
            out.append(fits[-1])
    out = list(dict.fromkeys(out))
    out = [f"{a}+PTX" if a in ptx else a for a in out]
    return sorted(out, key=lambda a: version_key(a.removesuffix("+PTX")))


def _arguments(text: str, start: int) -> tuple[list[tuple[str, bool]], int] | None:
    """The arguments of the command whose '(' is at ``start``: (text, quoted), and the offset after ')'."""
    args: list[tuple[str, bool]] = []
    i, depth, n = start + 1, 1, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            args.append((text[i + 1:j], True))
            i = j + 1
        elif ch == "(":
            depth += 1
            args.append(("(", False))
            i += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return args, i + 1
            args.append((")", False))
            i += 1
        else:
            m = CMAKE_TOKEN.match(text, i)
            assert m is not None
            args.append((m.group(), False))
            i = m.end()
    return None


def _strip_comments(text: str) -> str:
    """``#`` comments blanked (not inside quotes), lines kept."""
    out = []
    for line in text.split("\n"):
        quoted, end = False, len(line)
        for i, ch in enumerate(line):
            if ch == '"':
                quoted = not quoted
            elif ch == "#" and not quoted:
                end = i
                break
        out.append(line[:end])
    return "\n".join(out)


class _Configure:
    def __init__(self, read: Callable[[str], str | None], cell: list[str], cuda: str) -> None:
        self.read = read
        self.vars: dict[str, str] = {"CMAKE_CUDA_COMPILER_VERSION": cuda, "VLLM_GPU_LANG": "CUDA",
                                     "CUDA_FOUND": "TRUE", "CMAKE_SYSTEM_NAME": "Linux"}
        self.cell = cell
        self.families: list[Family] = []
        self.active: set[str] = set()  # .cu paths named by commands this configure ran
        self.inactive: set[str] = set()  # .cu paths named only in branches it did not take
        self.budget = _MAX_COMMANDS
        self.depth = 0

    # -- values -------------------------------------------------------------------------------
    def expand(self, text: str) -> str:
        for _ in range(8):
            new = re.sub(r"\$\{(\w+)\}", lambda m: self.vars.get(m[1], ""), text)
            if new == text:
                break
            text = new
        return text

    def values(self, args: list[tuple[str, bool]]) -> list[str]:
        out: list[str] = []
        for text, quoted in args:
            value = self.expand(text)
            out.extend([value] if quoted else [v for v in value.split(";") if v])
        return out

    # -- conditions ---------------------------------------------------------------------------
    def condition(self, args: list[tuple[str, bool]]) -> bool:
        tokens = [(self.expand(t), q) for t, q in args]
        pos = 0

        def atom_value(tok: tuple[str, bool]) -> str:
            text, quoted = tok
            return self.vars[text] if not quoted and text in self.vars else text

        def truth(tok: tuple[str, bool]) -> bool:
            text, quoted = tok
            if text.upper() in ("ON", "YES", "TRUE", "Y") or re.fullmatch(r"[1-9]\d*", text):
                return True
            if text.upper() in _FALSE or text.upper().endswith("-NOTFOUND"):
                return False
            value = self.vars.get(text) if not quoted else text
            return value is not None and value.upper() not in _FALSE and not value.upper().endswith("-NOTFOUND")

        def primary() -> bool:
            nonlocal pos
            if pos >= len(tokens):
                return False
            text, quoted = tokens[pos]
            if text == "(" and not quoted:
                pos += 1
                value = disjunction()
                if pos < len(tokens) and tokens[pos][0] == ")":
                    pos += 1
                return value
            if text == "DEFINED" and not quoted:
                pos += 1
                name = tokens[pos][0] if pos < len(tokens) else ""
                pos += 1
                return name in self.vars
            if text in ("EXISTS", "TARGET", "COMMAND", "POLICY", "IS_DIRECTORY") and not quoted:
                pos += 2
                return False
            left = tokens[pos]
            pos += 1
            if pos < len(tokens) and not tokens[pos][1]:
                op = tokens[pos][0]
                if op in _VERSION_OPS or op in _COMPARE or op in ("STREQUAL", "MATCHES", "IN_LIST"):
                    right = tokens[pos + 1] if pos + 1 < len(tokens) else ("", True)
                    pos += 2
                    a, b = atom_value(left), atom_value(right)
                    if op in _VERSION_OPS:
                        return bool(a) and bool(b) and _VERSION_OPS[op](version_key(a), version_key(b))
                    if op == "STREQUAL":
                        return a == b
                    if op == "MATCHES":
                        try:
                            return re.search(b, a) is not None
                        except re.error:
                            return False
                    if op == "IN_LIST":
                        return a in self.vars.get(right[0], "").split(";")
                    try:
                        x, y = float(a), float(b)
                    except ValueError:
                        return False
                    return bool(_COMPARE[op](x, y))
            return truth(left)

        def negation() -> bool:
            nonlocal pos
            if pos < len(tokens) and tokens[pos] == ("NOT", False):
                pos += 1
                return not negation()
            return primary()

        def joined(word: str, operand: Callable[[], bool]) -> bool:
            """Operands joined by ``word`` (AND, OR), each read before the next: none is skipped."""
            nonlocal pos
            values = [operand()]
            while pos < len(tokens) and tokens[pos] == (word, False):
                pos += 1
                values.append(operand())
            return all(values) if word == "AND" else any(values)

        def disjunction() -> bool:
            return joined("OR", lambda: joined("AND", negation))

        return disjunction()

    # -- files --------------------------------------------------------------------------------
    def run(self, rel: str) -> None:
        text = self.read(rel)
        if text is None or self.depth > 8:
            return
        self.depth += 1
        try:
            self._run(rel, _strip_comments(text))
        finally:
            self.depth -= 1

    def _run(self, rel: str, text: str) -> None:
        # (parent active, a branch already taken, this branch active)
        stack: list[tuple[bool, bool, bool]] = []
        skip: list[str] = []  # the _BLOCKS open around the reader
        at = 0
        while self.budget > 0:
            m = _COMMAND.search(text, at)
            if m is None:
                return
            parsed = _arguments(text, m.end() - 1)
            if parsed is None:
                return
            args, at = parsed
            self.budget -= 1
            name = m[1].lower()
            if skip:
                if name in _BLOCKS:
                    skip.append(name)
                elif name.removeprefix("end") in _BLOCKS:
                    skip.pop()
                continue
            active = all(s[2] for s in stack)
            if name == "if":
                taken = active and self.condition(args)
                stack.append((active, taken, taken))
                continue
            if name == "elseif" and stack:
                parent, taken, _ = stack[-1]
                now = parent and not taken and self.condition(args)
                stack[-1] = (parent, taken or now, now)
                continue
            if name == "else" and stack:
                parent, taken, _ = stack[-1]
                stack[-1] = (parent, True, parent and not taken)
                continue
            if name == "endif" and stack:
                stack.pop()
                continue
            if not active:
                self.inactive.update(self.globs(args) if _is_glob(name, args) else
                                     (self.expand(t) for t, _ in args if t.endswith(".cu")))
            if name in _BLOCKS:
                skip.append(name)
            elif active:
                line = text.count("\n", 0, m.start()) + 1
                self.command(name, args, f"{rel}:{line}", posixpath.dirname(rel))

    def command(self, name: str, args: list[tuple[str, bool]], where: str, base: str) -> None:
        values = self.values(args)
        self.active.update(v for v in values if v.endswith(".cu"))
        if name == "set" and values:
            items = values[1:]
            for stop in ("CACHE", "PARENT_SCOPE"):
                if stop in items:
                    items = items[:items.index(stop)]
            self.vars[values[0]] = ";".join(items)
        elif name == "unset" and values:
            self.vars.pop(values[0], None)
        elif name == "list" and len(values) >= 2:
            op, var, items = values[0], values[1], values[2:]
            current = [v for v in self.vars.get(var, "").split(";") if v]
            if op in ("APPEND", "PREPEND"):
                current = current + items if op == "APPEND" else items + current
            elif op == "REMOVE_ITEM":
                current = [v for v in current if v not in items]
            elif op == "REMOVE_DUPLICATES":
                current = list(dict.fromkeys(current))
            else:
                return
            self.vars[var] = ";".join(current)
        elif name == "extract_unique_cuda_archs_ascending" and values:
            self.vars[values[0]] = ";".join(self.cell)
        elif name == "cuda_archs_loose_intersection" and len(args) >= 3:
            out = args[0][0]
            src = [v for v in self.expand(args[1][0]).split(";") if v]
            tgt = [v for v in self.expand(args[2][0]).split(";") if v]
            self.vars[out] = ";".join(loose_intersection(src, tgt))
            self.vars[f"farm-supported:{out}"] = args[1][0]
        elif _is_glob(name, args):  # VAR holds the globs themselves
            patterns = self.globs(args)
            self.active.update(patterns)
            self.vars[self.expand(args[1][0])] = ";".join(patterns)
        elif name == "set_gencode_flags_for_srcs":
            self.gencode(args, where)
        elif name == "include" and values:
            target = values[0]
            for candidate in (target, target + ".cmake", posixpath.join(base, target),
                              posixpath.join(base, target + ".cmake")):
                if candidate.endswith(".cmake") and self.read(candidate) is not None:
                    self.run(candidate)
                    break

    def globs(self, args: list[tuple[str, bool]]) -> list[str]:
        """The globs of ``file(GLOB[_RECURSE] VAR [LIST_DIRECTORIES b] [RELATIVE dir]
        [CONFIGURE_DEPENDS] globs...)``, from the source dir (a glob outside it is dropped)."""
        recurse = args[0][0] == "GLOB_RECURSE"
        patterns: list[str] = []
        rest = iter(args[2:])
        for text, quoted in rest:
            if not quoted and text in ("LIST_DIRECTORIES", "RELATIVE"):  # RELATIVE: taken as the source dir
                next(rest, None)
                continue
            if not quoted and text in ("CONFIGURE_DEPENDS", "FOLLOW_SYMLINKS"):
                continue
            source_dir = text.startswith(_SOURCE_DIRS)
            for value in (self.expand(text).split(";") if not quoted else [self.expand(text)]):
                path = value.lstrip("/") if source_dir else value
                if not path or path.startswith("/") or (path := posixpath.normpath(path)).startswith("../"):
                    continue
                if recurse:  # CMake's GLOB_RECURSE matches the file name in every folder below
                    head, tail = posixpath.split(path)
                    path = posixpath.join(head, "**", tail) if head else posixpath.join("**", tail)
                patterns.append(path)
        return patterns

    def gencode(self, args: list[tuple[str, bool]], where: str) -> None:
        keyword = ""
        srcs: list[str] = []
        arch_args: list[tuple[str, bool]] = []
        ptx = ""
        for text, quoted in args:
            if not quoted and text in ("SRCS", "CUDA_ARCHS", "BUILD_PTX_FOR_ARCH"):
                keyword = text
                continue
            if keyword == "SRCS":
                srcs.extend(v for v in self.expand(text).split(";") if v)
            elif keyword == "CUDA_ARCHS":
                arch_args.append((text, quoted))
            elif keyword == "BUILD_PTX_FOR_ARCH":
                ptx = self.expand(text)
        archs = [v for t, _ in arch_args for v in self.expand(t).split(";") if v]
        names = re.findall(r"\$\{(\w+)\}", " ".join(t for t, _ in arch_args))
        name = names[0] if names else "(literal)"
        if ptx and archs and version_key(max(archs, key=version_key)) >= version_key(ptx):
            archs.append(f"{ptx}+PTX")
        units = [s for s in srcs if s.endswith(".cu")]
        sources = tuple(s for s in units if not is_pattern(s))
        patterns = tuple(dict.fromkeys(s for s in units if is_pattern(s)))
        if (sources or patterns) and archs:
            self.families.append(Family(name, where, self.vars.get(f"farm-supported:{name}", ""), tuple(archs),
                                        sources, patterns))


def _is_glob(name: str, args: list[tuple[str, bool]]) -> bool:
    return name == "file" and len(args) >= 3 and args[0][0] in ("GLOB", "GLOB_RECURSE")


def uses_families(text: str) -> bool:
    """Whether a CMake file gives sources their own gencode flags the way this module reads."""
    return "set_gencode_flags_for_srcs" in text


@dataclass(frozen=True)
class Configured:
    families: tuple[Family, ...] = ()
    # .cu files the CMake files name only in branches this cell does not take (a kernel built
    # from CUDA 13.0 on, on the 12.9 line): not compiled for it
    not_built: frozenset[str] = frozenset()


def derive(read: Callable[[str], str | None], root_cmake: str, archs: ArchList, cuda: str) -> Configured:
    """The families of the CMake project at ``root_cmake`` configured for ``archs`` with CUDA
    ``cuda``; ``read(rel)`` gives a tree file's text or None."""
    cell = sorted({t.version for t in archs}, key=lambda v: version_key(v.rstrip("af")))
    configure = _Configure(read, cell, cuda)
    configure.run(root_cmake)
    return Configured(tuple(configure.families), frozenset(configure.inactive - configure.active))
