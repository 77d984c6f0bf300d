"""The rules: arch gates (the stub trap), FP8, explicit targets and arch-list overrides.

**Arch gates.** Every ``#if``/``#elif`` chain whose conditions read ``__CUDA_ARCH__``, the
``a``/``f`` feature macros (``__CUDA_ARCH_FEAT_SM90_ALL``, ``__CUDA_ARCH_SPECIFIC__``,
``__CUDA_ARCH_FAMILY_SPECIFIC__``) or a macro the code derives from them (``#if __CUDA_ARCH__ >= 800``
/ ``#define ARCH_SUPPORTS_FLASH``), and every CCCL ``NV_IF_TARGET`` / ``NV_IF_ELSE_TARGET`` /
``NV_DISPATCH_TARGET`` with ``NV_PROVIDES_SM_*`` / ``NV_IS_EXACTLY_SM_*`` / ``NV_HAS_FEATURE_SM_*``,
is evaluated twice for every device the declared list claims (at or above its lowest arch): once as
if the device ran code built for itself, once with the image the driver really picks
(:func:`farm.model.driver.pick_image`). Where the two take different branches and the device's own branch
does real work, the device runs the other branch: an **error** when that branch does nothing
(empty inside a function body, or only ``__trap()``, ``__brkpt()``, ``assert(0)``, ``printf``, a
bare ``return`` or one of a constant), an **info** when it is a real implementation or fails the
build loudly (``#error``, ``static_assert``). When the device's own branch is no better (``#if
__CUDA_ARCH__ == 900`` ... ``#else printf``, reached by a newer device through compute_90), the
image's branch is no trap and declaring the arch would not help: nothing is reported. A branch
that is empty at namespace or class scope only removes declarations (using them fails the build),
and a branch that only defines macros is judged where those macros are used. Feature macros
nested in several gates, the ``#if !defined(X) && cond`` guard idiom and function-like macros that
read the arch (CUTLASS's ``CUDA_ARCH_FAMILY(1000)``) are followed.

FP8 outside gates: torch's ``c10::Float8_*`` types and ``ScalarType`` tags are portable host/device
code, not FP8 instructions, and are not counted.

**FP8.** ``e4m3``/``e5m2`` inside an ``asm`` statement outside any arch gate is an FP8 instruction,
which ptxas assembles only from sm_89: an error wherever the list compiles it for less. FP8 types
and ``cuda_fp8.h`` conversions elsewhere compile everywhere and convert in software below 8.9: an
info when a device from 8.9 up runs an image below 8.9.

**Arch-specific instructions** (:mod:`farm.lint.isa`): ``wgmma``, ``setmaxnreg``, ``tcgen05``, the
block-scaled ``mma`` and the rest that only an ``a``/``f`` target assembles: an error for every
target the translation unit is compiled for that cannot assemble them, unless a guard keeps the
code out of that image.

**Explicit targets** (build files): ``sm_XX[a|f]``, ``compute_XX``, ``-gencode arch=..,code=..``,
``-arch=``, CMake ``CUDA_ARCHITECTURES`` values: every target the build would emit must be declared.

**Arch-list overrides** (build files): assigning ``TORCH_CUDA_ARCH_LIST``, setting
``CMAKE_CUDA_ARCHITECTURES``/``CUDA_ARCHITECTURES``/``CUDAARCHS``, and (Python builds, Makefiles)
any nvcc flag containing ``arch``, which makes torch ignore ``TORCH_CUDA_ARCH_LIST``.

Only compiled files count (:mod:`farm.lint.compiled`). Gates inside vendored libraries are
summarised, not reported one by one: a library's gated templates become device code only where the
package instantiates them, and the package's own uses (its gates on the library's feature macros,
its FP8 types) are what the rules check.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import fnmatch
import functools
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from farm.lint import families as fam
from farm.lint import isa
from farm.lint.compiled import BuildScope, TreeIndex, extension_sources, include_closure, kind_of_build_file
from farm.lint.lexer import (
    blank_lines,
    line_starts,
    strip_c,
    strip_directive_comments,
    strip_hash_comments,
    strip_python_comments,
)
from farm.lint.preproc import (
    ArchContext,
    Branch,
    Chain,
    Directives,
    Expr,
    Scope,
    evaluate,
    identifiers,
    is_arch_symbol,
    parse_expr,
    scan_directives,
)
from farm.lint.report import LibrarySummary, LintFinding, LintRule, LintSeverity
from farm.model.arch import ArchList, Kind, Target, Variant
from farm.model.config import KernelFamily
from farm.model.devices import products
from farm.model.driver import Device, claimed_devices, pick_image

_TRIGGERS = ("__CUDA_ARCH", "NV_IF_", "NV_DISPATCH_TARGET")
_FP8_TAILS = tuple(f"{a}{m}{b}" for a in "45" for m in "mM" for b in "23")  # [eE][45][mM][23] less its [eE]
_FP8 = re.compile(r"\b\w*(?:e4m3|e5m2)\w*", re.IGNORECASE)
# torch's c10::Float8_* types convert in portable code on every arch, and the ScalarType tags of
# the same name (kFloat8_e4m3fn, ScalarType::Float8_e5m2) are host-side dtype checks.
_TORCH_FP8 = re.compile(r"k?Float8_e[45]m[23]\w*")
_NV_TARGET = re.compile(r"\bNV_(IF_TARGET|IF_ELSE_TARGET|DISPATCH_TARGET)\s*\(")
_TRAP = re.compile(r"__trap\s*\(|__brkpt\s*\(|\btrap\s*;|\bbrkpt\s*;|__builtin_trap|__builtin_unreachable|"
                   r"\babort\s*\(|\bexit\s*\(|CUTE_INVALID_CONTROL_PATH|CUTLASS_NOT_IMPLEMENTED|"
                   r"\bassert\s*\(\s*(?:0|false)\s*[),&]")
_NO_WORK = re.compile(r"^(?:printf|fprintf|std::printf|assert|__trap|__brkpt|abort|exit|std::abort|"
                      r"CUTE_INVALID_CONTROL_PATH|CUTLASS_NOT_IMPLEMENTED|CUTE_GCC_UNREACHABLE|"
                      r"__builtin_trap|__builtin_unreachable|\(void\))\b|^\(void\)|^return$|"
                      # a helper named for what it does (nunchaku's trap_unsupported_arch())
                      r"^(?:\w*_)?trap(?:_\w*)?\s*\(|"
                      # returning a constant in place of the computation (``return 0.f;``) is a stub;
                      # returning what a fallback computes (``return slow(x);``) is work
                      r"^return\s*\(?\s*(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFuUlL]*|false|true|"
                      r"nullptr|NULL|\{\s*\})\s*\)?$")
_LOUD = re.compile(r"^static_assert\b")
SNIPPET = 160


def may_gate(text: str) -> bool:
    """Whether ``text`` mentions anything a rule reads in C code (``__CUDA_ARCH``, CCCL's
    ``NV_IF_*``/``NV_DISPATCH_TARGET``, an FP8 ``e4m3``/``e5m2`` in any case): most compiled files
    do not, and are never parsed. str.find, not a regex: re scans megabytes of headers for a
    character class many times slower."""
    if any(word in text for word in _TRIGGERS):
        return True
    for tail in _FP8_TAILS:
        at = text.find(tail, 1)
        while at != -1:
            if text[at - 1] in "eE":
                return True
            at = text.find(tail, at + 1)
    return False


# ------------------------------------------------------------------------------------------------
# Devices: what each claimed device runs, and what it would run if built for itself
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceRun:
    device: Device
    target: Target
    native: ArchContext
    image: ArchContext

    @property
    def label(self) -> str:
        examples = products(self.device)
        return f"{self.device} ({examples})" if examples else str(self.device)


def device_runs(archs: ArchList) -> list[DeviceRun]:
    """Claimed devices that get an image, with the native and the real compile context."""
    runs = []
    for device in claimed_devices(archs):
        choice = pick_image(archs, device)
        if choice.target is None:
            continue  # no image at all: cudaErrorNoKernelImageForDevice, `farm explain`'s business
        native = ArchContext(device.number * 10, arch_specific=device.number >= 90,
                             family_specific=device.number >= 100)
        runs.append(DeviceRun(device, choice.target, native, _context(choice.target)))
    return runs


def _arch_needed(run: DeviceRun, chain: Chain, aliases: dict[str, Expr]) -> Target:
    """The arch to declare so that ``run.device`` takes its native branch: plain, then f, then a."""
    want = _taken(chain, Scope(run.native, aliases))
    d = run.device
    for variant in (Variant.NONE, Variant.FAMILY, Variant.ARCH):
        target = Target(d.major, d.minor, variant)
        if _taken(chain, Scope(_context(target), aliases)) == want:
            return target
    return Target(d.major, d.minor, Variant.ARCH)


def _taken(chain: Chain, scope: Scope) -> int | None:
    """Index of the branch taken under ``scope`` (len(branches) for the implicit empty else)."""
    for i, branch in enumerate(chain.branches):
        if branch.cond is None:
            return i
        value = evaluate(branch.cond, scope)
        if value is None:
            return None
        if value:
            return i
    return len(chain.branches)


# ------------------------------------------------------------------------------------------------
# Parsed C files
# ------------------------------------------------------------------------------------------------
@dataclass
class CFile:
    rel: str
    raw: str
    code: str  # comments/strings blanked, dead #if 0 lines blanked
    directives: Directives
    library: str | None
    # Made on first use: a library's files are read for their directives alone.
    _starts: list[int] | None = field(default=None, repr=False)
    _lines: list[str] | None = field(default=None, repr=False)
    _scope: tuple[list[int], list[bool]] | None = field(default=None, repr=False)
    _one_branch: str | None = field(default=None, repr=False)

    @property
    def starts(self) -> list[int]:
        """The offset of each line in ``code``."""
        if self._starts is None:
            self._starts = line_starts(self.code)
        return self._starts

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def offset_of(self, line: int) -> int:
        return self.starts[line - 1] if line - 1 < len(self.starts) else len(self.code)

    def line_text(self, line: int) -> str:
        if self._lines is None:
            self._lines = self.raw.split("\n")
        text = self._lines[line - 1].strip() if 0 < line <= len(self._lines) else ""
        return text[:SNIPPET]

    def in_function(self, line: int) -> bool:
        """Whether ``line`` lies inside a function body (braces tracked on the stripped code)."""
        if self._scope is None:
            self._scope = _brace_states(self.code, self.directives.directive_lines)
        positions, states = self._scope
        i = bisect.bisect_right(positions, self.offset_of(line)) - 1
        return states[i] if i >= 0 else False


def parse_c(rel: str, raw: str, library: str | None) -> CFile:
    # A vendored library's files are read for their conditions only (feature macros and the
    # summary), so only the comments on directive lines need to go.
    stripped = strip_c(raw) if library is None else strip_directive_comments(raw)
    directives = scan_directives(stripped)
    code = blank_lines(stripped, directives.dead)
    return CFile(rel, raw, code, directives, library)


_BRACE = re.compile(r"[{};]")


def _brace_states(code: str, directive_lines: set[int]) -> tuple[list[int], list[bool]]:
    """Offsets where the in-function state changes, and the state from each offset on."""
    code = blank_lines(code, directive_lines, keep_offsets=True)
    stack: list[str] = []
    positions: list[int] = []
    states: list[bool] = []
    boundary = 0
    for m in _BRACE.finditer(code):
        ch = m.group()
        if ch == "{":
            head = code[boundary:m.start()]
            if re.search(r"\bnamespace\b|\bextern\s*\"", head):
                kind = "ns"
            elif re.search(r"\b(struct|class|union|enum)\b", head) and ")" not in head.rsplit(">", 1)[-1]:
                kind = "class"
            elif re.search(r"(=|\breturn|,|\()\s*$", head):
                kind = stack[-1] if stack else "ns"  # an initialiser: same scope as around it
            else:
                kind = "body" if (head.strip() or (stack and stack[-1] == "body")) else (stack[-1] if stack else "ns")
            stack.append(kind)
        elif ch == "}" and stack:
            stack.pop()
        boundary = m.end()
        if ch != ";":
            positions.append(m.end())
            states.append("body" in stack)
    return positions, states


# ------------------------------------------------------------------------------------------------
# Gates: preprocessor chains and CCCL NV_IF_TARGET
# ------------------------------------------------------------------------------------------------
@dataclass
class Gate:
    """An arch gate: a chain of branches plus where each branch's body lies (offsets)."""

    file: CFile
    chain: Chain
    spans: list[tuple[int, int]]  # body offsets per branch; one more for the implicit else
    line: int
    snippet: str
    in_function: bool
    is_preprocessor: bool

    def body(self, index: int) -> tuple[int, int]:
        return self.spans[index] if index < len(self.spans) else (0, 0)


def _is_gate(chain: Chain, aliases: dict[str, Expr]) -> bool:
    return any(is_arch_symbol(name) or name in aliases or f"{name}()" in aliases
               for branch in chain.branches if branch.cond is not None for name in identifiers(branch.cond))


def collect_aliases(files: Iterable[CFile]) -> dict[str, Expr]:
    """Macros defined exactly when an arch condition holds: ``NAME -> condition``.

    A define nested in several gates means all of them (CUTLASS defines
    ``CUTLASS_ARCH_MMA_SM90A_ENABLED`` under ``__CUDA_ARCH__ == 900`` and, inside that,
    ``__CUDA_ARCH_FEAT_SM90_ALL``); several define sites in one file mean any of them."""
    files = list(files)
    aliases: dict[str, Expr] = {}
    # Function-like macros whose body reads the arch (CUTLASS's CUDA_ARCH_FAMILY(1000)), keyed
    # "NAME()"; a definition that reads the arch wins over its ``(false)`` twin for host passes.
    functions = [(name, params, body, parsed) for f in files for _, name, params, body in f.directives.functions
                 if (parsed := parse_expr(body)) is not None]
    for _ in range(4):  # macros built from such macros (CUDA_ARCH_CONDITIONAL_OR_FAMILY)
        before = len(aliases)
        for name, params, body, parsed in functions:
            if any(is_arch_symbol(i) or f"{i}()" in aliases for i in identifiers(parsed)):
                aliases.setdefault(f"{name}()", ("macro", params, body))
        if len(aliases) == before:
            break
    for _ in range(4):  # aliases of aliases: a few rounds reach the fixpoint
        before = len(aliases)
        for f in files:
            _file_aliases(f, aliases)
        if len(aliases) == before:
            break
    return aliases


def _branch_condition(chain: Chain, i: int) -> Expr:
    cond: Expr = chain.branches[i].cond or ("num", 1)
    for earlier in chain.branches[:i]:
        if earlier.cond is not None:
            cond = ("&&", ("u!", earlier.cond), cond)
    return cond


def _file_aliases(f: CFile, aliases: dict[str, Expr]) -> None:
    gates = [chain for chain in f.directives.chains if _is_gate(chain, aliases)]
    if not gates:
        return
    sites: dict[str, list[Expr]] = {}
    value_macros: set[str] = set()
    for line, name, _ in f.directives.defines:
        if name in aliases or is_arch_symbol(name) or line in f.directives.dead:
            continue
        enclosing = [(chain, i) for chain in gates for i, b in enumerate(chain.branches)
                     if b.body[0] <= line < b.body[1]]
        if not enclosing:
            continue
        # The innermost gate: a macro it defines in every branch, else included, is a value, not a feature.
        inner, _ = max(enclosing, key=lambda pair: pair[0].line)
        if inner.has_else() and all(any(n == name and b.body[0] <= ln < b.body[1]
                                         for ln, n, _ in f.directives.defines) for b in inner.branches):
            value_macros.add(name)
            continue
        terms = []
        for chain, i in enclosing:
            cond = _branch_condition(chain, i)
            # The guard idiom ``#if !defined(X) && cond`` / ``#define X``: X means cond, for the X
            # this branch defines (an outer guard's X as much as the inner one's).
            body = chain.branches[i].body
            for guarded in {n for ln, n, _ in f.directives.defines if body[0] <= ln < body[1]}:
                cond = _undefine(cond, guarded)
            terms.append(cond)
        sites.setdefault(name, []).append(functools.reduce(lambda a, b: ("&&", a, b), terms))
    for name, terms in sites.items():
        if name not in value_macros:
            aliases[name] = functools.reduce(lambda a, b: ("||", a, b), terms)


def _undefine(expr: Expr, name: str) -> Expr:
    """``expr`` with ``defined(name)`` replaced by 0."""
    if expr[0] == "defined":
        return ("num", 0) if expr[1] == name else expr
    if expr[0] in ("num", "id", "call"):
        return expr
    return (expr[0], *(_undefine(sub, name) for sub in expr[1:]))


def preprocessor_gates(f: CFile, aliases: dict[str, Expr]) -> Iterator[Gate]:
    for chain in f.directives.chains:
        if chain.line in f.directives.dead or not _is_gate(chain, aliases):
            continue
        spans = [(f.offset_of(b.body[0]), f.offset_of(b.body[1])) for b in chain.branches]
        end = f.offset_of(chain.end_line)
        spans.append((end, end))
        yield Gate(f, chain, spans, chain.line, f.line_text(chain.line), f.in_function(chain.line), True)


_QUERY = (
    (re.compile(r"^NV_PROVIDES_SM_(\d+)$"), lambda n: (">=", ("id", "__CUDA_ARCH__"), ("num", n * 10))),
    (re.compile(r"^NV_IS_EXACTLY_SM_(\d+)$"), lambda n: ("==", ("id", "__CUDA_ARCH__"), ("num", n * 10))),
    (re.compile(r"^NV_HAS_FEATURE_SM_(\d+)a$"), lambda n: ("defined", f"__CUDA_ARCH_FEAT_SM{n}_ALL")),
    (re.compile(r"^NV_HAS_FEATURE_SM_(\d+)f$"),
     lambda n: (">=", ("id", "__CUDA_ARCH_FAMILY_SPECIFIC__"), ("num", n * 10))),
)


def _query(text: str) -> Expr | None:
    text = text.strip()
    for pattern, build in _QUERY:
        m = pattern.match(text)
        if m:
            return build(int(m[1]))
    return None


def _split_args(code: str, open_paren: int) -> tuple[list[tuple[int, int]], int] | None:
    """Top-level argument spans of the call whose '(' is at ``open_paren``, and the ')' offset."""
    depth, start, args = 0, open_paren + 1, []
    for i in range(open_paren, min(len(code), open_paren + 200_000)):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append((start, i))
                return args, i
        elif ch == "," and depth == 1:
            args.append((start, i))
            start = i + 1
    return None


def _asm_statements(f: CFile) -> Iterator[tuple[int, int, int]]:
    """The offsets of the keyword's end, the '(' and the ')' of every ``asm``/``__asm__`` statement."""
    for m in re.finditer(r"\b(?:asm|__asm__)\b", f.code):
        paren = f.code.find("(", m.end(), m.end() + 40)
        parsed = _split_args(f.code, paren) if paren != -1 else None
        if parsed is not None:
            yield m.end(), paren, parsed[1]


def nv_target_gates(f: CFile) -> Iterator[Gate]:
    if "NV_" not in f.code:
        return
    for m in _NV_TARGET.finditer(f.code):
        line = f.line_of(m.start())
        if line in f.directives.directive_lines:
            continue  # CCCL's own macro definitions
        parsed = _split_args(f.code, m.end() - 1)
        if parsed is None:
            continue
        args, _ = parsed
        pairs: list[tuple[Expr | None, tuple[int, int]]]
        if m[1] == "DISPATCH_TARGET":
            pairs = [(_query(f.code[q[0]:q[1]]), body) for q, body in zip(args[0::2], args[1::2], strict=False)]
        else:
            pairs = [(_query(f.code[args[0][0]:args[0][1]]), args[1] if len(args) > 1 else (0, 0))]
            if len(args) > 2:
                pairs.append((None, args[2]))
        if not pairs or pairs[0][0] is None or any(cond is None for cond, _ in pairs[:-1]):
            continue  # host/device dispatch, not an arch gate
        chain = Chain([Branch(cond, "", line, (line, line)) for cond, _ in pairs], line)
        spans = [body for _, body in pairs] + [(0, 0)]
        yield Gate(f, chain, spans, line, f.line_text(line), True, False)


# ------------------------------------------------------------------------------------------------
# What a branch does
# ------------------------------------------------------------------------------------------------
def classify(gate: Gate, index: int, macros: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """('stub'|'real'|'loud'|'definitions'|'absent', detail) for the body of branch ``index``."""
    start, end = gate.body(index)
    f = gate.file
    code = f.code[start:end]
    raw = f.raw[start:end]
    had_directives = False
    if gate.is_preprocessor:
        lines = code.split("\n")
        directives = [text.strip() for text in lines if text.strip().startswith("#")]
        if any(re.match(r"#\s*error\b", text) for text in directives):
            return "loud", "#error"
        had_directives = bool(directives)
        code = "\n".join(" " * len(text) if text.strip().startswith("#") else text for text in lines)
    else:
        inner = code.strip()
        if inner.startswith("(") and inner.endswith(")"):
            offset = code.index("(") + 1
            code = " " * offset + code[offset:code.rindex(")")]
            raw = raw[:len(code)]
    # Statements with their raw text (same offsets: stripping keeps them), less the headers of
    # functions and structs (a "{" after no "="), whose bodies follow.
    statements = [(m[1].strip(), " ".join(raw[m.start(1):m.end(1)].split()))
                  for m in re.finditer(r"([^;{}]*)([;{}]|$)", code)
                  if m[1].strip() and not (m[2] == "{" and "=" not in m[1])]
    work: list[str] = []
    quiet: list[str] = []
    loud = False
    for piece, text in statements:
        value, shown = macros.get(piece, ("", ""))
        parts = [x.strip() for x in re.split(r"[;{}]", value) if x.strip()] if value else [piece]
        for part in parts:
            if _LOUD.match(part):
                loud = True
            elif part.startswith(("asm", "__asm__")) and not re.search(r"\btrap\b|\bbrkpt\b", text):
                work.append(text)
            elif _NO_WORK.match(part) or _TRAP.search(part) or part.startswith(("asm", "__asm__")):
                quiet.append(text if not value else f"{piece} -> {shown}")
            else:
                work.append(text)
    if work:
        return "real", work[0][:80]
    if loud:
        return "loud", "static_assert"
    if quiet:
        return "stub", quiet[0][:80]
    if had_directives:
        return "definitions", ""
    if gate.in_function or not gate.is_preprocessor:
        return "stub", "empty branch"
    return "absent", ""


def _needs(chosen: list[DeviceRun], chain: Chain, archs: ArchList, aliases: dict[str, Expr]) -> tuple[str, ...]:
    """The fewest arches to add so that every affected device takes its native branch."""
    added: list[Target] = []
    for run in sorted(chosen, key=lambda r: r.device):
        want = _taken(chain, Scope(run.native, aliases))
        current = pick_image(list(archs) + added, run.device).target
        if (current is not None and current not in archs.targets
                and _taken(chain, Scope(_context(current), aliases)) == want):
            continue  # an arch added for a lower device already serves this one
        added.append(_arch_needed(run, chain, aliases))
    return tuple(t.version for t in added)


def _devices_text(chosen: list[DeviceRun]) -> str:
    by_image: dict[str, list[str]] = {}
    for run in chosen:
        by_image.setdefault(run.target.name, []).append(run.label)
    return "; ".join(f"{', '.join(labels)} {'runs' if len(labels) == 1 else 'run'} {image}"
                     for image, labels in by_image.items())


def gate_findings(gate: Gate, runs: list[DeviceRun], archs: ArchList, aliases: dict[str, Expr],
                  macros: dict[str, tuple[str, str]]) -> LintFinding | None:
    stubbed: list[tuple[DeviceRun, str, int]] = []
    fallback: list[tuple[DeviceRun, str, int]] = []
    for run in runs:
        image_i = _taken(gate.chain, Scope(run.image, aliases))
        if image_i is None:
            continue
        native_i = _taken(gate.chain, Scope(run.native, aliases))
        if native_i == image_i:
            continue
        if native_i is not None and classify(gate, native_i, macros)[0] != "real":
            # The device's own branch is no better (``#if __CUDA_ARCH__ == 900`` ... ``#else printf``
            # on a newer device): the image's branch is not a trap, and declaring the arch helps nothing.
            continue
        kind, detail = classify(gate, image_i, macros)
        if kind == "stub":
            stubbed.append((run, detail, image_i))
        elif kind in ("real", "loud"):
            fallback.append((run, detail, image_i))
    chosen = stubbed or fallback
    if not chosen:
        return None
    runs_chosen = [run for run, _, _ in chosen]
    needs = _needs(runs_chosen, gate.chain, archs, aliases)
    run, detail, image_i = chosen[0]
    branch_line = gate.chain.branches[image_i].line if image_i < len(gate.chain.branches) else gate.chain.end_line
    where = f"the branch at line {branch_line}" if gate.is_preprocessor else "the other branch"
    names = _devices_text(runs_chosen)
    they = "it takes" if len(runs_chosen) == 1 else "they take"
    if stubbed:
        message = (f"stub trap: {names}, below this gate, so {they} {where}, which does nothing "
                   f"({detail}): kernels launch and compute nothing")
        severity = LintSeverity.ERROR
        fix = (f"declare {', '.join(needs)} in the package's arch list, or lint_ignore rule arch-gate with "
               "the reason these devices never reach this code")
    else:
        message = (f"{names}, below this gate, so {they} the fallback, {where} ({detail}): correct, "
                   "but not the code written for these devices")
        severity = LintSeverity.INFO
        fix = f"declare {', '.join(needs)} to run the code written for these devices"
    return LintFinding(LintRule.ARCH_GATE.value, severity, gate.file.rel, gate.line, gate.snippet, message, needs,
                       archs.canonical(), fix, tuple(run.label for run in runs_chosen))


def own_image_stub(gate: Gate, runs: list[DeviceRun], archs: ArchList, aliases: dict[str, Expr],
                   macros: dict[str, tuple[str, str]]) -> LintFinding | None:
    """A declared arch whose own image takes a branch that does nothing while another branch of the
    same gate does the work (``if constexpr (__CUDA_ARCH__ >= 800) ... else trap`` with 7.5 listed):
    the wheel claims the arch, and this code is a stub there. An info: correct only while the
    package never launches it on that arch, which the lint cannot see."""
    hit: list[tuple[DeviceRun, str, int]] = []
    for run in runs:
        if run.target.number != run.device.number:
            continue
        taken = _taken(gate.chain, Scope(run.image, aliases))
        if taken is None:
            continue
        kind, detail = classify(gate, taken, macros)
        if kind != "stub":
            continue
        if any(classify(gate, i, macros)[0] == "real" for i in range(len(gate.chain.branches) + 1) if i != taken):
            hit.append((run, detail, taken))
    if not hit:
        return None
    run, detail, taken = hit[0]
    branch_line = gate.chain.branches[taken].line if taken < len(gate.chain.branches) else gate.chain.end_line
    where = f"the branch at line {branch_line}" if gate.is_preprocessor else "the other branch"
    labels = [r.label for r, _, _ in hit]
    return LintFinding(
        LintRule.ARCH_GATE.value, LintSeverity.INFO, gate.file.rel, gate.line, gate.snippet,
        f"declared {', '.join(labels)} {'runs its own image' if len(hit) == 1 else 'run their own images'} "
        f"({', '.join(r.target.name for r, _, _ in hit)}), where this gate takes {where}, which does nothing "
        f"({detail}): the wheel claims the arch, and this code is a stub there",
        (), archs.canonical(),
        "correct only if the package never launches this code on these arches (its dispatch checks the "
        "device); otherwise drop them from the list, or lint_ignore rule arch-gate with the reason",
        tuple(labels),
    )


# ------------------------------------------------------------------------------------------------
# FP8
# ------------------------------------------------------------------------------------------------
def fp8_findings(f: CFile, gated: list[tuple[int, int]], runs: list[DeviceRun], archs: ArchList,
                 reach: Reach) -> list[LintFinding]:
    """FP8 outside any arch gate. In an ``asm`` statement it is an instruction, which ptxas
    assembles only from sm_89 ("Feature 'cvt with .e4m3x2/.e5m2x2' requires .target sm_89 or
    higher"): an error wherever the list compiles it for less. Elsewhere it is a type or a
    ``cuda_fp8.h`` conversion, which compiles for every arch and converts in software below 8.9:
    an info when a device from 8.9 up runs such an image."""
    types = [(m.start(), m.group()) for m in _FP8.finditer(f.code) if not _TORCH_FP8.fullmatch(m.group())]
    instructions = [(hit.start(), hit.group()) for keyword_end, _, close in _asm_statements(f)
                    for hit in _FP8.finditer(f.raw, keyword_end, close)]
    out: list[LintFinding] = []
    instructions = [(pos, word) for pos, word in instructions if not any(a <= pos < b for a, b in gated)]
    low = [t for t in archs if t.number < 89]
    if instructions:
        # only the images that compile the instruction: its function reached there (the gate
        # macros, nunchaku's `if constexpr (FP4_AVAILABLE)`)
        low = [t for t in low if any(
            used_in(f, pos, dataclasses.replace(reach, ctx=_context(t))) for pos, _ in instructions)]
    if instructions and low:
        pos, word = min(instructions)
        line = f.line_of(pos)
        more = len({f.line_of(p) for p, _ in instructions}) - 1
        suffix = f" (and {more} more lines in this file)" if more else ""
        out.append(LintFinding(
            LintRule.FP8.value, LintSeverity.ERROR, f.rel, line, f.line_text(line),
            f"FP8 instruction ({word}) in asm outside any arch gate{suffix}, compiled for "
            f"{', '.join(t.name for t in low)}: ptxas assembles FP8 instructions only for sm_89 and later, "
            "so the build fails",
            ("8.9",), archs.canonical(),
            "gate the asm on __CUDA_ARCH__ >= 890 (with a fallback for the older images), compile this "
            "translation unit for 8.9 and later only, or lint_ignore rule fp8 with the reason",
        ))
    types = [(pos, word) for pos, word in types if not any(a <= pos < b for a, b in gated)]
    short = [run for run in runs if run.device.number >= 89 and run.image.cuda_arch < 890]
    if types and short:
        pos, word = min(types)
        line = f.line_of(pos)
        more = len({f.line_of(p) for p, _ in types}) - 1
        labels = tuple(f"{run.label} runs {run.target.name}" for run in short)
        suffix = f" (and {more} more lines in this file)" if more else ""
        out.append(LintFinding(
            LintRule.FP8.value, LintSeverity.INFO, f.rel, line, f.line_text(line),
            f"FP8 type or conversion ({word}) outside any arch gate{suffix}: {', '.join(labels)}, below 8.9, "
            "where cuda_fp8.h converts in software: correct, slower than the hardware conversion",
            ("8.9",), archs.canonical(),
            "declare 8.9 for the hardware FP8 conversions on every device from 8.9 up",
            tuple(run.label for run in short),
        ))
    return out


# ------------------------------------------------------------------------------------------------
# Build files
# ------------------------------------------------------------------------------------------------
_GENCODE = re.compile(r"arch\s*=\s*(?:compute|sm)_\d+[af]?\s*,\s*code\s*=\s*(\[[^\]]*\]|[\w,]+)")
_TARGET = re.compile(r"\b(sm|compute)_(\d{2,3})([af]?)\b")
_ARCH_FLAG = re.compile(r"(?<![\w-])-(?:arch|-gpu-architecture)[= ]\s*(sm|compute)_(\d{2,3})([af]?)\b")
_CMAKE_ARCHS = re.compile(r"(?:CMAKE_|\b)CUDA_ARCHITECTURES\b(.*)")
_CMAKE_VALUE = re.compile(r"\b(\d{2,3}[af]?)(-real|-virtual)?\b")
_TORCH_ASSIGN = re.compile(r"TORCH_CUDA_ARCH_LIST['\"]?\s*\]?\s*=(?!=)|putenv\(\s*['\"]TORCH_CUDA_ARCH_LIST|"
                           r"environ\.update\(.*TORCH_CUDA_ARCH_LIST")
_TORCH_DEFAULT = re.compile(r"setdefault\(\s*['\"]TORCH_CUDA_ARCH_LIST")
_CMAKE_SET = re.compile(r"\bset\s*\(\s*(CMAKE_CUDA_ARCHITECTURES|ENV\{CUDAARCHS\})|"
                        r"\bCUDA_ARCHITECTURES\b|\bCUDAARCHS\s*[:?]?=", re.IGNORECASE)
_CMAKE_GUARD = re.compile(r"\bif\s*\(\s*NOT\s+(DEFINED\s+)?(CMAKE_CUDA_ARCHITECTURES|ENV\{CUDAARCHS\})",
                          re.IGNORECASE)
_NVCC_ARCH = re.compile(r"""(["'])(?:(?!\1).)*?(?:-gencode|--generate-code|(?<![\w-])-arch\b|--gpu-architecture|"""
                        r"""(?<![\w-])-code=|\barch=(?:compute|sm)_)(?:(?!\1).)*\1""")
_MARCH = re.compile(r"""(["'])-m(?:arch|tune)=[^"']*\1""")
_MAKE_ARCH = re.compile(r"(?:-gencode|--generate-code|(?<![\w-])-arch[= ]|--gpu-architecture)")


def _spaces(m: re.Match[str]) -> str:
    return " " * len(m[0])


def _needs_text(t: Target) -> str:
    return t.version + ("+PTX" if t.kind is Kind.PTX else "")


def targets_in_line(line: str, kind: str) -> list[Target]:
    """The device targets a build-file line would make nvcc emit."""
    found = [Target.from_name(t[0]) for m in _GENCODE.finditer(line) for t in _TARGET.finditer(m[1])]
    masked = _GENCODE.sub(_spaces, line)
    for m in _ARCH_FLAG.finditer(masked):
        t = Target.from_name(f"{m[1]}_{m[2]}{m[3]}")
        found.extend([t, t.with_kind(Kind.PTX)] if t.kind is Kind.SASS else [t])
    masked = _ARCH_FLAG.sub(_spaces, masked)
    found.extend(Target.from_name(m[0]) for m in _TARGET.finditer(masked))
    if kind == "cmake":
        cmake = _CMAKE_ARCHS.search(masked)
        if cmake:
            for value, suffix in _CMAKE_VALUE.findall(cmake[1]):
                t = Target.from_name(f"sm_{value}")
                if suffix != "-virtual":
                    found.append(t)
                if suffix != "-real":
                    found.append(t.with_kind(Kind.PTX))
    return list(dict.fromkeys(found))


def build_file_findings(index: TreeIndex, rel: str, archs: ArchList) -> list[LintFinding]:
    kind = kind_of_build_file(rel) or "toml"
    raw = index.text(rel)
    raw_lines = raw.split("\n")
    declared = archs.canonical()
    out: list[LintFinding] = []

    def snippet(number: int) -> str:
        return raw_lines[number - 1].strip()[:SNIPPET] if 0 < number <= len(raw_lines) else ""

    def override(number: int, found: tuple[LintSeverity, str, str]) -> None:
        severity, message, fix = found
        out.append(LintFinding(LintRule.ARCH_OVERRIDE.value, severity, rel, number, snippet(number), message, (),
                               declared, fix))

    def targets(number: int, text: str) -> None:
        missing = [t for t in targets_in_line(text, kind) if t not in archs.targets]
        if missing:
            names = ", ".join(t.name for t in missing)
            out.append(LintFinding(
                LintRule.EXPLICIT_TARGET.value, LintSeverity.ERROR, rel, number, snippet(number),
                f"the build names {names}, which the declared list does not have: the wheel would carry "
                "targets nobody declared, or code written for them never gets built",
                tuple(_needs_text(t) for t in missing), declared,
                f"declare {', '.join(_needs_text(t) for t in missing)} in the package's arch list, or "
                "lint_ignore rule explicit-target with the reason (e.g. the line is never executed)",
            ))

    events = python_events(raw) if kind == "python" else None
    if events is not None:
        for number, event, text in events:
            if event == "assign":
                override(number, _ASSIGNED)
            elif event == "default":
                override(number, _DEFAULTED)
            elif _CMAKE_DEFINE.search(text):
                override(number, _CMAKE_DEFINED if event == "string" else _CMAKE_COMPUTED)
            elif _NVCC_ARCH_VALUE.search(text):
                override(number, _NVCC_FLAGS if event == "string" else _NVCC_COMPUTED)
                targets(number, text)
            elif _MARCH_VALUE.search(text):
                override(number, _MARCH_FLAG)
            else:
                targets(number, text)
        return _merge(out, index, rel, kind, archs)

    code = strip_python_comments(raw) if kind == "python" else strip_hash_comments(raw)
    code_lines = code.split("\n")
    for number, line in enumerate(code_lines, 1):
        if not line.strip():
            continue
        found = _override(kind, line, code_lines, number)
        if found:
            override(number, found)
            if found[0] is LintSeverity.INFO or _TORCH_ASSIGN.search(line):
                continue  # a default the farm overrides, or the assigned list itself: no separate targets
        targets(number, line)
    return _merge(out, index, rel, kind, archs)


_FIX_ENV = ("make the build take the farm's list (patch_script removing the override), or declare exactly "
            "what it builds and lint_ignore rule arch-override with the reason")
_ASSIGNED = (LintSeverity.ERROR, "assigns TORCH_CUDA_ARCH_LIST: the build uses this value, not the farm's arch list",
             _FIX_ENV)
_DEFAULTED = (LintSeverity.INFO, "sets a default TORCH_CUDA_ARCH_LIST: harmless while the farm exports the list",
              "nothing to do unless the farm stops exporting TORCH_CUDA_ARCH_LIST")
_NVCC_FLAGS = (LintSeverity.ERROR,
               ("passes an nvcc flag containing 'arch': torch then adds no arch flags and ignores "
                "TORCH_CUDA_ARCH_LIST; the wheel gets exactly the targets these flags name"), _FIX_ENV)
_NVCC_COMPUTED = (LintSeverity.INFO,
                  ("computes nvcc arch flags at build time: if they reach torch's nvcc flags, torch ignores "
                   "TORCH_CUDA_ARCH_LIST; the lint cannot see which targets they name"),
                  ("check that these flags are derived from TORCH_CUDA_ARCH_LIST (the post-build assertion "
                   "checks the result either way)"))
_MARCH_FLAG = (LintSeverity.INFO,
               "a -march/-mtune flag: if it reaches the nvcc flags, torch ignores TORCH_CUDA_ARCH_LIST",
               "keep it in the host compiler's flags only")
_NVCC_ARCH_VALUE = re.compile(r"-gencode|--generate-code|(?<![\w-])-arch\b|--gpu-architecture|(?<![\w-])-code=|"
                              r"\barch=(?:compute|sm)_")
_MARCH_VALUE = re.compile(r"(?<![\w-])-m(?:arch|tune)=")
_MESSAGE_CALLS = frozenset({"print", "warn", "info", "warning", "error", "debug", "exception", "critical",
                            "echo", "fail", "write"})
_HOST_KEY = re.compile(r"^(cxx|cc|c|host)$|link|cxx_?flags", re.IGNORECASE)
_ENV_NAMES = frozenset({"TORCH_CUDA_ARCH_LIST", "CUDAARCHS", "CMAKE_CUDA_ARCHITECTURES"})
_CMAKE_DEFINE = re.compile(r"CMAKE_CUDA_ARCHITECTURES\s*[=:]")
_CMAKE_DEFINED = (LintSeverity.ERROR,
                  "passes CMAKE_CUDA_ARCHITECTURES to CMake: the build uses this value, not the farm's arch list",
                  _FIX_ENV)
_CMAKE_COMPUTED = (LintSeverity.INFO,
                   ("computes CMAKE_CUDA_ARCHITECTURES at build time: the lint cannot see whether it follows "
                    "the farm's list"),
                   "check that it is derived from the farm's list (the post-build assertion checks the result)")


def python_events(text: str) -> list[tuple[int, str, str]] | None:
    """What a Python build script does with arch lists and flags, from its syntax tree:
    ``(line, 'assign'|'default'|'string'|'fstring', text)``. Docstrings and message strings
    (``raise``, ``assert``, ``print``, logging, warnings) are prose, not flags. None when the
    file does not parse (the line-based reading applies then)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    events: list[tuple[int, str, str]] = []

    def host_flags(target: ast.AST) -> bool:
        """A target that holds host compiler or linker flags (``args["cxx"]``, ``extra_link_args``):
        torch gives these to the host compiler, not to nvcc."""
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            return bool(_HOST_KEY.search(str(target.slice.value)))
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        return bool(_HOST_KEY.search(name))

    def is_env_key(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in _ENV_NAMES

    class Visitor(ast.NodeVisitor):
        def visit_Expr(self, node: ast.Expr) -> None:
            if isinstance(node.value, (ast.Constant, ast.JoinedStr)):
                return  # a docstring or a bare string: documentation
            self.generic_visit(node)

        def visit_Raise(self, node: ast.Raise) -> None:  # noqa: ARG002 (the visitor's signature)
            return

        def visit_Assert(self, node: ast.Assert) -> None:
            self.visit(node.test)

        def visit_If(self, node: ast.If) -> None:
            if re.search(r"darwin|macos", ast.unparse(node.test), re.IGNORECASE):
                for stmt in node.orelse:  # macOS has no CUDA: only the other branch builds here
                    self.visit(stmt)
                return
            self.generic_visit(node)

        def visit_Assign(self, node: ast.Assign) -> None:
            if any(isinstance(t, ast.Subscript) and is_env_key(t.slice) for t in node.targets):
                events.append((node.lineno, "assign", ""))
                return
            if not any(host_flags(t) for t in node.targets):
                self.generic_visit(node)

        def visit_AugAssign(self, node: ast.AugAssign) -> None:
            if not host_flags(node.target):
                self.generic_visit(node)

        def visit_Dict(self, node: ast.Dict) -> None:
            if any(is_env_key(k) for k in node.keys):  # an environment for a build subprocess
                events.append((node.lineno, "assign", ""))
                return
            for key, value in zip(node.keys, node.values, strict=True):
                if not (isinstance(key, ast.Constant) and _HOST_KEY.search(str(key.value))):
                    self.visit(value)

        def visit_Call(self, node: ast.Call) -> None:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _MESSAGE_CALLS:
                return
            if any(k.arg in _ENV_NAMES for k in node.keywords) or (
                    name in ("putenv", "update", "__setitem__") and node.args and is_env_key(node.args[0])):
                events.append((node.lineno, "assign", ""))
                return
            if name == "setdefault" and node.args and is_env_key(node.args[0]):
                events.append((node.lineno, "default", ""))
                return
            self.generic_visit(node)

        def visit_Constant(self, node: ast.Constant) -> None:
            if isinstance(node.value, str):
                events.append((node.lineno, "string", node.value))

        def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            events.append((node.lineno, "fstring", "".join(str(p) for p in parts)))
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    self.visit(v.value)

    Visitor().visit(tree)
    return sorted(events)


def _merge(findings: list[LintFinding], index: TreeIndex, rel: str, kind: str, archs: ArchList) -> list[LintFinding]:
    """One finding per (rule, message) in a file, listing every line: one cause, one entry."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[LintFinding]] = {}
    for f in findings:
        groups.setdefault((f.rule, f.message, f.needs), []).append(f)
    merged = []
    for (rule, found, _), items in groups.items():
        first, message = items[0], found
        if rule == LintRule.ARCH_OVERRIDE.value and first.severity is LintSeverity.ERROR:
            message += _what_it_builds(index, rel, kind, [f.line for f in items], archs)
        if len(items) > 1:
            message += f" (lines {', '.join(str(f.line) for f in items)})"
        merged.append(dataclasses.replace(first, message=message))
    return merged


def _what_it_builds(index: TreeIndex, rel: str, kind: str, lines: list[int], archs: ArchList) -> str:
    """What the overriding lines build, against what is declared."""
    raw = index.text(rel).split("\n")
    named = [t for number in lines for t in targets_in_line(raw[number - 1], kind)]
    if not named:
        return ""
    built = ArchList.of(named)
    text = f"; these lines build {built.canonical()}"
    absent = [t for t in archs if t not in built.targets]
    if absent:
        text += (f", so {', '.join(t.name for t in absent)} from the declared list would be missing "
                 "and the post-build assertion would fail")
    return text


def _override(kind: str, line: str, lines: list[str], number: int) -> tuple[LintSeverity, str, str] | None:
    """The override a build-file line makes, read line by line (CMake, Make, TOML, unparsable Python)."""
    if _TORCH_DEFAULT.search(line):
        return _DEFAULTED
    if _TORCH_ASSIGN.search(line) and not re.search(r"TORCH_CUDA_ARCH_LIST['\"]?\s*\]?\s*==", line):
        return _ASSIGNED
    if kind != "cmake" and _CMAKE_DEFINE.search(line):
        return _CMAKE_DEFINED
    if kind == "cmake" and _CMAKE_SET.search(line):
        if any(_CMAKE_GUARD.search(lines[i]) for i in range(max(0, number - 4), number - 1)):
            return (LintSeverity.INFO, "sets CUDA architectures only when none are given: the farm's list wins",
                    "nothing to do")
        return (LintSeverity.ERROR,
                ("sets the CUDA architectures in the build: the farm's CMAKE_CUDA_ARCHITECTURES/CUDAARCHS is "
                 "overridden or intersected away"), _FIX_ENV)
    if kind == "python":
        if _NVCC_ARCH.search(line):
            return _NVCC_FLAGS
        if _MARCH.search(line):
            return _MARCH_FLAG
    if kind == "make" and _MAKE_ARCH.search(line):
        return (LintSeverity.ERROR, "the Makefile picks nvcc arch flags itself: the farm's list is not used", _FIX_ENV)
    return None


# ------------------------------------------------------------------------------------------------
# Everything for one tree
# ------------------------------------------------------------------------------------------------
def check(index: TreeIndex, scope: BuildScope, archs: ArchList, extensions: Sequence[tuple[str, ArchList]],
          configured: fam.Configured) -> tuple[list[LintFinding], list[LibrarySummary]]:
    """Every rule on the tree. ``extensions``: the recipe's own lists for extensions matching a
    glob; ``configured``: kernel families with their own targets (and the sources the cell does
    not build). The translation units of such an
    extension or family (and what they include) are judged against its list, the others against
    ``archs``."""
    findings = [found for rel in scope.build_files for found in build_file_findings(index, rel, archs)]
    findings.extend(generated_findings(index, configured.families, archs))

    parsed: dict[str, CFile] = {}
    for rel in sorted(scope.compiled):
        raw = index.text(rel)
        first_party = scope.library_of(rel) is None
        if may_gate(raw) or (first_party and (isa.may_use(raw) or ("_ENABLED" in raw and _GUARD_USE.search(raw)))):
            parsed[rel] = parse_c(rel, raw, scope.library_of(rel))
    aliases = collect_aliases(parsed.values())
    if aliases:
        # First-party files that only use derived feature macros are gates too.
        names = sorted({a.removesuffix("()") for a in aliases})
        alias_re = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
        for rel in sorted(scope.compiled):
            if rel not in parsed and scope.library_of(rel) is None:
                raw = index.text(rel)
                # the names as plain substrings first: the alternation is slow to scan a file with
                if any(name in raw for name in names) and alias_re.search(raw):
                    parsed[rel] = parse_c(rel, raw, None)
    known_guards(parsed.values(), aliases)
    constexpr_flags(parsed.values(), aliases)
    # each macro's value, and its definition as a message shows it
    macros = {name: (value, f.line_text(line).split(name, 1)[-1].strip()[:80]) for f in parsed.values()
              for line, name, value in f.directives.defines if value}

    libraries: dict[str, list[int]] = {}
    thresholds: dict[str, set[str]] = {}
    for f in parsed.values():
        if f.library is not None:
            gates = [c for c in f.directives.chains if c.line not in f.directives.dead and _is_gate(c, {})]
            counts = libraries.setdefault(f.library, [0, 0])
            counts[0] += 1
            counts[1] += len(gates)
            seen = thresholds.setdefault(f.library, set())
            for chain in gates:
                for branch in chain.branches:
                    seen.update(f"{int(n)}" for n in re.findall(r"__CUDA_ARCH__\s*[<>=!]=?\s*(\d+)", branch.text))
                    seen.update(f"sm_{n}a" for n in re.findall(r"FEAT_SM(\d+)_ALL", branch.text))
    unique: dict[tuple[str, str, int, str], LintFinding] = {}
    others: dict[str, CFile] = {}  # files parsed only to follow a use (shared by every group)
    for group in compile_groups(index, scope, archs, extensions, configured):
        runs = device_runs(group.archs)
        reach = Reach(group, index, scope, parsed, aliases, others=others)
        for rel in sorted(group.files):
            if rel not in parsed or parsed[rel].library is not None:
                continue
            f = parsed[rel]
            out: list[LintFinding] = []
            gated: list[tuple[int, int]] = []
            for gate in [*preprocessor_gates(f, aliases), *nv_target_gates(f), *constexpr_gates(f, aliases)]:
                gated.append((gate.spans[0][0], gate.spans[-2][1] if len(gate.spans) > 1 else gate.spans[0][1]))
                if not used_in(f, gate.spans[0][0], reach):
                    continue
                finding = (gate_findings(gate, runs, group.archs, aliases, macros)
                           or own_image_stub(gate, runs, group.archs, aliases, macros))
                if finding is not None:
                    out.append(finding)
            out.extend(fp8_findings(f, gated, runs, group.archs, reach))
            out.extend(arch_specific_findings(f, reach))
            for finding in out:
                unique.setdefault((finding.rule, finding.path, finding.line, finding.message), finding)
    findings.extend(unique.values())
    summaries = [
        LibrarySummary(lib, counts[0], counts[1], tuple(sorted(thresholds.get(lib, ()), key=_threshold_key)))
        for lib, counts in sorted(libraries.items())
    ]
    findings.sort(key=lambda x: (x.severity is not LintSeverity.ERROR, x.path, x.line, x.rule))
    return findings, summaries


# ------------------------------------------------------------------------------------------------
# Which list each translation unit is compiled for
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileGroup:
    """Translation units compiled for one arch list, and every file they include."""

    archs: ArchList
    label: str  # "the package's list" or "extension sageattention._qattn_sm90 (*_qattn_sm90*)"
    seeds: tuple[str, ...]
    files: frozenset[str]


def compile_groups(index: TreeIndex, scope: BuildScope, archs: ArchList, extensions: Sequence[tuple[str, ArchList]],
                   configured: fam.Configured) -> list[CompileGroup]:
    """The translation units by the list they are compiled for: a kernel family's own targets
    (:mod:`farm.lint.families`; a unit in several families gets all of their targets, as the
    flags add up), else an extension's own list where the recipe declares one for it (matched by
    the extension's name, as the assertion matches its ``.so``), else the package's list."""
    seeds = tuple(rel for rel in device_units(index, scope) if rel not in configured.not_built)
    if not extensions and not configured.families:
        return [CompileGroup(archs, "the package's list", seeds, frozenset(include_closure(index, seeds)))]
    by_seed: dict[str, tuple[str, ArchList]] = {}
    for name, sources in extension_sources(index, scope).items():
        for glob, own in extensions:
            if fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(name.replace(".", "/"), glob):
                for rel in sources:
                    by_seed.setdefault(rel, (f"extension {name} ({glob})", own))
                break
    in_families: dict[str, list[fam.Family]] = {}
    for family in configured.families:
        for rel in family.sources:
            in_families.setdefault(rel, []).append(family)
    for rel, found in in_families.items():
        label = "family " + " + ".join(f"{f.name} ({f.where})" for f in found)
        by_seed[rel] = (label, ArchList.of(t for f in found for t in f.targets))
    groups: dict[tuple[str, str], tuple[ArchList, list[str]]] = {}
    for seed in seeds:
        label, own = by_seed.get(seed, ("the package's list", archs))
        groups.setdefault((label, own.canonical()), (own, []))[1].append(seed)
    return [CompileGroup(own, label, tuple(units), frozenset(include_closure(index, units)))
            for (label, _), (own, units) in groups.items()]


def generated_findings(index: TreeIndex, families: Sequence[fam.Family], archs: ArchList) -> list[LintFinding]:
    """An info per family glob that matches no file in the tree: its files are written by the
    build (vLLM's Machete and Marlin generators), so they are not linted, and the assertion
    judges the translation units whose names match the glob against the family's targets."""
    out = []
    for family in families:
        path, _, line = family.where.rpartition(":")
        for pattern in family.patterns:
            if any(rel.endswith(".cu") for rel in index.glob(pattern)):
                continue
            out.append(LintFinding(
                LintRule.GENERATED.value, LintSeverity.INFO, path, int(line) if line.isdigit() else 0,
                f"file(GLOB) {pattern}",
                f"kernel family {family.name} compiles the files of {pattern}, which matches no file in the "
                f"tree: they are generated at build time, so they are not linted; the post-build assertion "
                f"judges the translation units named by it against the family's targets "
                f"({family.targets.canonical() or 'none'})",
                (), archs.canonical(),
                "nothing, if the build writes these files before it compiles them; otherwise fix the glob"))
    return out


def declared_families(index: TreeIndex, scope: BuildScope, archs: ArchList, cuda: str,
                      declared: Sequence[KernelFamily]) -> fam.Configured:
    """The recipe's own families for this cell: each ``archs`` intersected with the cell's list
    as vLLM's CMake does; a family whose CUDA line is later, or that the list does not ask for,
    is not built."""
    cell = sorted({t.version for t in archs}, key=lambda v: fam.version_key(v.rstrip("af")))
    families: list[fam.Family] = []
    not_built: set[str] = set()
    for family in declared:
        sources = tuple(sorted({rel for pattern in family.sources
                                for rel in index.glob(posixpath.join(scope.build_root, pattern))
                                if rel.endswith(".cu")}))
        resolved = fam.loose_intersection(family.archs.split(";"), cell)
        if (family.min_cuda and fam.version_key(cuda) < fam.version_key(family.min_cuda)) or not resolved:
            not_built.update(sources)
        elif sources:
            families.append(fam.Family(family.name, family.where, family.archs, tuple(resolved), sources))
    return fam.Configured(tuple(families), frozenset(not_built))


def kernel_families(index: TreeIndex, scope: BuildScope, archs: ArchList, cuda: str) -> fam.Configured:
    """The families the build's CMake project gives their own targets, configured for this cell
    (sources outside the tree, such as an external project's, dropped), and the tree's sources
    it does not build for this cell."""
    root = posixpath.join(scope.build_root, "CMakeLists.txt") if scope.build_root else "CMakeLists.txt"
    cmake = [rel for rel in scope.build_files if kind_of_build_file(rel) == "cmake"]
    if root not in index.fileset or not any(fam.uses_families(index.text(rel)) for rel in cmake):
        return fam.Configured()

    def in_tree(path: str) -> str:
        return posixpath.normpath(posixpath.join(scope.build_root, path))

    def read(rel: str) -> str | None:
        return index.text(path) if (path := in_tree(rel)) in index.fileset else None

    def files(path: str) -> list[str]:
        """The tree's files a source names: itself, or what its glob matches now."""
        if fam.is_pattern(path):
            return [rel for rel in index.glob(in_tree(path)) if rel.endswith(".cu")]
        return [rel] if (rel := in_tree(path)) in index.fileset else []

    configured = fam.derive(read, "CMakeLists.txt", archs, cuda)
    families = []
    for family in configured.families:
        # a glob's files in the tree are linted as the family's; the glob itself goes on, for
        # the files the build writes before it compiles them
        sources = tuple(dict.fromkeys(rel for s in (*family.sources, *family.patterns) for rel in files(s)))
        patterns = tuple(in_tree(p) for p in family.patterns)
        if sources or patterns:
            families.append(dataclasses.replace(family, sources=sources, patterns=patterns,
                                                where=posixpath.join(scope.build_root, family.where)))
    not_built = frozenset(rel for s in configured.not_built
                          for rel in (files(s) if fam.is_pattern(s) else [in_tree(s)]))
    return fam.Configured(tuple(families), not_built)


_NOT_CUDA_DIRS = frozenset({"rocm", "hip", "cpu"})
_CPP_AS_CUDA = re.compile(r"(?<![\w-])-x\s*cu\b|\bLANGUAGE\s+CUDA\b|--x=cu\b")


def device_units(index: TreeIndex, scope: BuildScope) -> tuple[str, ...]:
    """The translation units nvcc compiles for the device: ``.cu`` files (a ``.cpp`` goes to the host
    compiler, where ``__CUDA_ARCH__`` is never defined, unless a build file compiles C++ as CUDA
    with ``-x cu`` or ``LANGUAGE CUDA``), outside ``rocm``/``hip``/``cpu`` directories (a ROCm-only
    extension's kernels, CPU kernels: never compiled by nvcc in a CUDA build)."""
    as_cuda = any(_CPP_AS_CUDA.search(index.text(rel)) for rel in scope.build_files)
    return tuple(rel for rel in scope.seeds
                 if (as_cuda or rel.endswith(".cu")) and not _NOT_CUDA_DIRS.intersection(rel.split("/")[:-1]))


_ENTITY = re.compile(r"\b(?:struct|class)\s+(\w+)[^;{}()]*\{|\b(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?\{")
_BRACES = re.compile(r"[{}]")
_NOT_NAMES = frozenset({"operator", "constexpr", "if", "for", "while", "switch", "return", "sizeof", "catch", "defined",
                        "decltype", "alignas", "__attribute__", "__launch_bounds__", "asm", "volatile"})


def enclosing_entities(f: CFile, offset: int) -> list[tuple[str, str]]:
    """The structs, classes and functions whose bodies hold ``offset``, outermost first: each
    name and the declaration before it (``template <...>``, ``inline __device__ ...``)."""
    code = _one_branch(f)
    found: list[tuple[str, str]] = []
    for m in _ENTITY.finditer(code, 0, offset):
        name = m[1] or m[2]
        if name in _NOT_NAMES:
            continue
        if _still_open(code, m.end() - 1, offset):
            start = max(code.rfind(ch, 0, m.start()) for ch in ";{}") + 1
            found.append((name, code[start:m.start()]))
    return found


def _still_open(code: str, brace: int, offset: int) -> bool:
    """Whether the ``{`` at ``brace`` is not yet closed at ``offset``."""
    depth = 0
    for m in _BRACES.finditer(code, brace, offset):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return False
    return depth > 0


def _one_branch(f: CFile) -> str:
    """``f.code`` with every branch but the first of each ``#if`` chain blanked, offsets kept:
    code written twice under ``#if``/``#else`` (``for (...) {`` in each) would unbalance the
    braces that say which entity holds a line."""
    if f._one_branch is None:
        later = {n for chain in f.directives.chains for branch in chain.branches[1:]
                 for n in range(branch.line, branch.body[1])}
        f._one_branch = blank_lines(f.code, later, keep_offsets=True)
    return f._one_branch


_DEFINITION = re.compile(r"\s*(?:<[^;{}]*>\s*)?(?::[^;{}]*)?\{|\s*\([^;{}]*\)\s*(?:const\s*)?\{")
_ON_USE = re.compile(r"\btemplate\b|\binline\b|__forceinline__|\bstatic\b|\bconstexpr\b")


@dataclass
class Reach:
    """What :func:`used_in` needs to follow uses across a group's files: the parsed files, the
    arch macros, and the device pass (None: any)."""

    group: CompileGroup
    index: TreeIndex
    scope: BuildScope
    parsed: dict[str, CFile]  # the files the rules parsed; others are parsed here, kept apart
    aliases: dict[str, Expr]
    ctx: ArchContext | None = None
    others: dict[str, CFile] = field(default_factory=dict)

    def file(self, rel: str) -> CFile:
        if rel in self.parsed:
            return self.parsed[rel]
        if rel not in self.others:
            self.others[rel] = parse_c(rel, self.index.text(rel), self.scope.library_of(rel))
        return self.others[rel]


def used_in(f: CFile, offset: int, reach: Reach, depth: int = 0) -> bool:
    """Whether the code at ``offset`` of a header becomes device code in this group (in the
    device pass ``reach.ctx``, when given). A template, or an inline or static function, is
    compiled only where a translation unit uses it: each such entity around ``offset`` (vLLM's
    enable_sm90_or_later and its ``invoke``; an inline FP4 helper) must be named somewhere the
    group compiles, outside code the device pass leaves out (nunchaku's ``if constexpr
    (FP4_AVAILABLE)`` on sm_80). A translation unit's own code, and any other definition, always
    counts; so does anything past a few levels of calls."""
    if f.rel in reach.group.seeds or depth > 4:
        return True
    for name, declaration in enclosing_entities(f, offset):
        if _ON_USE.search(declaration) and not _entity_used(f, name, reach, depth):
            return False
    return True


def _entity_used(f: CFile, name: str, reach: Reach, depth: int) -> bool:
    word = re.compile(rf"\b{re.escape(name)}\b")
    for rel in [f.rel, *sorted(reach.group.files - {f.rel})]:
        text = f.code if rel == f.rel else reach.index.text(rel)
        if name not in text or not word.search(text):
            continue
        g = f if rel == f.rel else reach.file(rel)
        if g.library is not None:
            return True  # a library's use: not followed
        for m in word.finditer(g.code):
            if _DEFINITION.match(g.code, m.end()):
                continue
            if reach.ctx is not None and not compiled_under(g, g.line_of(m.start()), reach.ctx, reach.aliases):
                continue
            recursive = g.rel == f.rel and any(n == name for n, _ in enclosing_entities(g, m.start()))
            if not recursive and used_in(g, m.start(), reach, depth + 1):
                return True
    return False


# ------------------------------------------------------------------------------------------------
# Arch-specific instructions
# ------------------------------------------------------------------------------------------------
def _context(t: Target) -> ArchContext:
    return ArchContext(t.cuda_arch, arch_specific=t.variant is Variant.ARCH,
                       family_specific=t.variant in (Variant.ARCH, Variant.FAMILY))


_GUARD_NAME = re.compile(r"(?:CUTE|CUTLASS)_ARCH_\w*ENABLED|SM\d+A?_|_SM\d+|ARCH")


def compiled_under(f: CFile, line: int, ctx: ArchContext, aliases: dict[str, Expr]) -> bool:
    """Whether ``line`` of ``f`` reaches the compiler in the device pass ``ctx``. A condition the
    lint cannot decide counts as taken (a project option may be on), unless it names an arch
    guard (a library's ``CUTE_ARCH_..._ENABLED`` the tree does not define): that is a guard."""
    scope = Scope(ctx, aliases)
    for chain in f.directives.chains:
        if chain.line in f.directives.dead or not chain.line < line < chain.end_line:
            continue
        for i, branch in enumerate(chain.branches):
            if not branch.body[0] <= line < branch.body[1]:
                continue
            taken = _taken(chain, scope)
            if taken is None:
                names = [n for b in chain.branches[:i + 1] if b.cond is not None for n in identifiers(b.cond)]
                if any(is_arch_symbol(n) or n in aliases or _GUARD_NAME.search(n) for n in names):
                    return False
            elif taken != i:
                return False
    for gate in constexpr_gates(f, aliases):
        offset = f.offset_of(line)
        for i, (start, end) in enumerate(gate.spans[:-1]):
            if start <= offset < end and _taken(gate.chain, scope) not in (None, i):
                return False
    return True


def arch_specific_uses(f: CFile) -> list[tuple[int, isa.ArchInstruction]]:
    """(line, instruction) of every arch-specific instruction in ``f``'s asm statements and of
    every arch-specific ``cuda::ptx`` wrapper it calls."""
    uses: list[tuple[int, isa.ArchInstruction]] = []
    if not isa.may_use(f.raw):
        return uses
    for _, paren, close in _asm_statements(f):
        text = f.raw[paren:close]
        row = isa.instruction_in_asm(text)
        if row is not None:
            at = re.search(row.pattern, text)
            uses.append((f.line_of(paren + (at.start() if at else 0)), row))
    uses.extend((f.line_of(offset), row) for offset, row in isa.intrinsics_in(f.code))
    return uses


def arch_specific_findings(f: CFile, reach: Reach) -> list[LintFinding]:
    group, aliases, index = reach.group, reach.aliases, reach.index
    by_row: dict[str, tuple[isa.ArchInstruction, list[int], list[Target]]] = {}
    for line, row in arch_specific_uses(f):
        bad = [t for t in group.archs if not row.accepted_by(t) and compiled_under(f, line, _context(t), aliases)
               and used_in(f, f.offset_of(line), dataclasses.replace(reach, ctx=_context(t)))]
        if bad:
            entry = by_row.setdefault(row.name, (row, [], []))
            entry[1].append(line)
            entry[2].extend(t for t in bad if t not in entry[2])
    out = []
    for row, lines, bad in by_row.values():
        units = [s for s in group.seeds if f.rel in include_closure(index, [s])]
        unit_text = ", ".join(units[:3]) + (f" and {len(units) - 3} more" if len(units) > 3 else "")
        more = f" (and {len(set(lines)) - 1} more lines in this file)" if len(set(lines)) > 1 else ""
        line = lines[0]
        out.append(LintFinding(
            LintRule.ARCH_SPECIFIC.value, LintSeverity.ERROR, f.rel, line, f.line_text(line),
            f"{row.name} (PTX ISA {row.ptx}, assembled only for {row.needs}) outside any guard{more}, in "
            f"{unit_text}, compiled with {group.label} for {', '.join(t.name for t in bad)}: ptxas rejects "
            f"it there, so the build fails (source: {row.source})",
            row.versions, group.archs.canonical(),
            f"compile {unit_text} for {row.needs} targets only (declare the extension's own list under "
            "extensions, and make the build give it exactly that), or guard the code with "
            "__CUDA_ARCH_FEAT_SM90_ALL / __CUDA_ARCH_SPECIFIC__ / __CUDA_ARCH_FAMILY_SPECIFIC__",
        ))
    return out


# ------------------------------------------------------------------------------------------------
# Gates the preprocessor does not see: ``if constexpr`` on the arch, and CUTLASS's guards
# ------------------------------------------------------------------------------------------------
_CONSTEXPR_IF = re.compile(r"\bif\s+constexpr\s*\(")


def _statement(code: str, at: int) -> tuple[int, int] | None:
    """The span of the statement or ``{`` block starting at or after ``at``."""
    while at < len(code) and code[at].isspace():
        at += 1
    if at >= len(code):
        return None
    if code[at] == "{":
        depth = 0
        for i in range(at, min(len(code), at + 400_000)):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            if depth == 0:
                return at, i + 1
        return None
    end = code.find(";", at)
    return (at, end + 1) if end != -1 else None


def constexpr_gates(f: CFile, aliases: dict[str, Expr]) -> Iterator[Gate]:
    """``if constexpr (__CUDA_ARCH__ >= 800) { ... } else { ... }``: a gate like ``#if``, decided per
    image at compile time (nunchaku writes its kernels so)."""
    if "constexpr" not in f.code:
        return
    for m in _CONSTEXPR_IF.finditer(f.code):
        parsed = _split_args(f.code, m.end() - 1)
        if parsed is None:
            continue
        _, close = parsed
        text = " ".join(f.code[m.end():close].split())
        cond = parse_expr(text)
        if cond is None:
            continue
        line = f.line_of(m.start())
        chain = Chain([Branch(cond, text, line, (line, line))], line)
        if not _is_gate(chain, aliases):
            continue
        body = _statement(f.code, close + 1)
        if body is None:
            continue
        spans = [body]
        rest = f.code[body[1]:body[1] + 200]
        other = re.match(r"\s*else\b(?!\s+if\b)", rest)
        if other:
            alternative = _statement(f.code, body[1] + other.end())
            if alternative is not None:
                chain.branches.append(Branch(None, "", f.line_of(body[1] + other.end()), (line, line)))
                spans.append(alternative)
        spans.append((body[1], body[1]))
        yield Gate(f, chain, spans, line, f.line_text(line), True, False)


_CONSTEXPR_FLAG = re.compile(r"\bconstexpr\s+bool\s+(\w+)\s*=\s*(true|false)\s*;")


def constexpr_flags(files: Iterable[CFile], aliases: dict[str, Expr]) -> None:
    """``static constexpr bool FP4_AVAILABLE = true;`` under ``#if __CUDA_ARCH__ >= 1200`` and
    ``= false`` under its ``#else`` (nunchaku): a name for the gate's condition, which its
    ``if constexpr (FP4_AVAILABLE)`` then reads like the ``#if``."""
    for f in files:
        if "constexpr" not in f.code:
            continue
        for chain in f.directives.chains:
            if chain.line in f.directives.dead or not _is_gate(chain, aliases):
                continue
            values: dict[str, dict[int, bool]] = {}
            for i, branch in enumerate(chain.branches):
                start, end = f.offset_of(branch.body[0]), f.offset_of(branch.body[1])
                for m in _CONSTEXPR_FLAG.finditer(f.code, start, end):
                    values.setdefault(m[1], {})[i] = m[2] == "true"
            for name, by_branch in values.items():
                if name in aliases or len(by_branch) < 2 or not any(by_branch.values()):
                    continue
                true_in = [_branch_condition(chain, i) for i, value in by_branch.items() if value]
                aliases[name] = functools.reduce(lambda a, b: ("||", a, b), true_in)


_GUARD_USE = re.compile(r"\b(?:CUTE|CUTLASS)_ARCH_(?:MMA_)?SM\d+[AF]?_ENABLED\b")
_LIBRARY_GUARD = re.compile(r"^(?:CUTE|CUTLASS)_ARCH_(?:MMA_)?SM(\d+)([AF]?)_ENABLED$")


def known_guards(files: Iterable[CFile], aliases: dict[str, Expr]) -> None:
    """CUTLASS's and CuTe's ``..._ARCH_MMA_SM90A_ENABLED`` style guards, when the tree does not
    hold the CUTLASS that defines them (a submodule left out): ``SM90`` means ``__CUDA_ARCH__ >=
    900``, ``SM90A`` the arch-specific feature macro, ``SM100F`` the family-specific one."""
    for f in files:
        for chain in f.directives.chains:
            for branch in chain.branches:
                if branch.cond is None:
                    continue
                for name in identifiers(branch.cond):
                    m = _LIBRARY_GUARD.match(name)
                    if m is None or name in aliases:
                        continue
                    n = int(m[1])
                    if m[2] == "A":
                        aliases[name] = ("defined", f"__CUDA_ARCH_FEAT_SM{n}_ALL")
                    elif m[2] == "F":
                        family = ("id", "__CUDA_ARCH_FAMILY_SPECIFIC__")
                        aliases[name] = ("&&", (">=", family, ("num", n * 10)),
                                         ("<", family, ("num", (n // 10 + 1) * 100)))
                    else:
                        aliases[name] = (">=", ("id", "__CUDA_ARCH__"), ("num", n * 10))


def _threshold_key(text: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", text)
    n = int(digits) if digits else 0
    return (n * 10 if text.startswith("sm_") else n, text)
