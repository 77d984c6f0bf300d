"""The preprocessor, as far as the lint needs it: conditional chains and their conditions.

A file's ``#if``/``#elif``/``#else``/``#endif`` directives become :class:`Chain` objects (one per
``#if`` ... ``#endif``), each with its branches and their line ranges. Conditions are parsed into a
small expression tree and evaluated with three values (true, false, unknown) under an
:class:`ArchContext`: what ``__CUDA_ARCH__`` and the feature macros are when nvcc compiles for
one image. Macros the lint cannot know (project options) are unknown, so a condition that depends
on them is never decided by guesswork.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from farm.lint.lexer import first_on_line

Expr = tuple[Any, ...]  # ("num", n) | ("id", name) | ("defined", name) | ("call", name, arg) | (op, a[, b[, c]])

_TOKEN = re.compile(
    r"\s*(?:(?P<num>0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>!~&|^()?:,]))"
)


class _ExprParser:
    """Precedence climbing over C preprocessor expressions."""

    _BINARY: tuple[tuple[str, ...], ...] = (("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="),
                                            ("<", "<=", ">", ">="), ("<<", ">>"), ("+", "-"), ("*", "/", "%"))

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ValueError(f"cannot parse {text!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise ValueError("unexpected end of expression")
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def parse(self) -> Expr:
        expr = self.ternary()
        if self.i != len(self.tokens):
            raise ValueError(f"trailing tokens in expression: {self.peek()!r}")
        return expr

    def ternary(self) -> Expr:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            a = self.ternary()
            if self.take()[1] != ":":
                raise ValueError("expected ':'")
            b = self.ternary()
            return ("?", cond, a, b)
        return cond

    def binary(self, level: int) -> Expr:
        if level == len(self._BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._BINARY[level]:
            op = self.take()[1]
            left = (op, left, self.binary(level + 1))
        return left

    def unary(self) -> Expr:
        tok = self.peek()
        if tok in ("!", "-", "+", "~"):
            self.take()
            return ("u" + tok, self.unary())
        return self.primary()

    def primary(self) -> Expr:
        kind, value = self.take()
        if kind == "num":
            return ("num", int(value, 0) if not value.startswith("0") or value.lower().startswith("0x") or value == "0"
                    else int(value, 8))
        if value == "(":
            expr = self.ternary()
            if self.take()[1] != ")":
                raise ValueError("expected ')'")
            return expr
        if kind == "id":
            if value == "defined":
                paren = self.peek() == "("
                if paren:
                    self.take()
                name = self.take()[1]
                if paren and self.take()[1] != ")":
                    raise ValueError("expected ')'")
                return ("defined", name)
            if self.peek() == "(":  # function-like macro: keep its first argument's text
                self.take()
                depth, parts = 1, []
                while depth:
                    _, tok = self.take()
                    depth += {"(": 1, ")": -1}.get(tok, 0)
                    if depth:
                        parts.append(tok)
                return ("call", value, "".join(parts))
            if value in ("true", "false"):
                return ("num", int(value == "true"))
            return ("id", value)
        raise ValueError(f"unexpected {value!r}")


@functools.lru_cache(maxsize=4096)
def parse_expr(text: str) -> Expr | None:
    """The expression tree of a condition, or None when it does not parse. Remembered: a
    library's headers repeat a few hundred conditions thousands of times, and the trees are
    immutable tuples."""
    try:
        return _ExprParser(text).parse()
    except (ValueError, IndexError):
        return None


@functools.lru_cache(maxsize=8192)
def identifiers(expr: Expr) -> tuple[str, ...]:
    """The names a condition reads, in order (remembered, as the trees are shared: see parse_expr)."""
    tag = expr[0]
    if tag in ("id", "defined"):
        return (expr[1],)
    if tag == "call":
        return (expr[1], *re.findall(r"[A-Za-z_]\w*", expr[2]))
    if tag == "num":
        return ()
    return tuple(name for sub in expr[1:] for name in identifiers(sub))


# --------------------------------------------------------------------------------------------
# Evaluation with three values: int, or None for "unknown".
# --------------------------------------------------------------------------------------------
UNDEFINED = object()  # a macro known not to be defined: evaluates to 0, defined() is 0

Lookup = Callable[[str], "int | object | None"]


def evaluate(expr: Expr, lookup: Lookup) -> int | None:
    tag = expr[0]
    if tag == "num":
        number: int = expr[1]
        return number
    if tag in ("id", "call"):
        value = lookup(expr[1] if tag == "id" else f"{expr[1]}({expr[2]})")
        return 0 if value is UNDEFINED else value  # type: ignore[return-value]
    if tag == "defined":
        value = lookup(expr[1])
        if value is UNDEFINED:
            return 0
        return None if value is None else 1
    if tag == "u!":
        v = evaluate(expr[1], lookup)
        return None if v is None else int(not v)
    if tag in ("u-", "u+", "u~"):
        v = evaluate(expr[1], lookup)
        return None if v is None else {"u-": -v, "u+": v, "u~": ~v}[tag]
    if tag == "&&":
        a = evaluate(expr[1], lookup)
        if a == 0:
            return 0
        b = evaluate(expr[2], lookup)
        if b == 0:
            return 0
        return None if a is None or b is None else 1
    if tag == "||":
        a = evaluate(expr[1], lookup)
        if a not in (0, None):
            return 1
        b = evaluate(expr[2], lookup)
        if b not in (0, None):
            return 1
        return None if a is None or b is None else 0
    if tag == "?":
        c = evaluate(expr[1], lookup)
        if c is None:
            a, b = evaluate(expr[2], lookup), evaluate(expr[3], lookup)
            return a if a == b else None
        return evaluate(expr[2] if c else expr[3], lookup)
    a, b = evaluate(expr[1], lookup), evaluate(expr[2], lookup)
    if a is None or b is None:
        return None
    try:
        return int(_BINOPS[tag](a, b))
    except ZeroDivisionError:
        return None


_BINOPS: Mapping[str, Callable[[int, int], int | bool]] = {
    "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "&": lambda a, b: a & b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "<<": lambda a, b: a << b if 0 <= b < 64 else 0, ">>": lambda a, b: a >> b if 0 <= b < 64 else 0,
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: int(a / b), "%": lambda a, b: a % b,
}


# --------------------------------------------------------------------------------------------
# What nvcc defines for one image.
# --------------------------------------------------------------------------------------------
_FEAT = re.compile(r"^__CUDA_ARCH_FEAT_SM(\d+)_ALL$")
_HAS_FEATURE = re.compile(r"^__CUDA_ARCH_HAS_FEATURE__\(SM(\d+)_ALL\)$")
ARCH_SYMBOL = re.compile(r"^__CUDA_ARCH(__|_SPECIFIC__|_FAMILY_SPECIFIC__|_FEAT_SM\d+_ALL|_HAS_FEATURE__)$")
# Defined by every CUDA compilation / never defined in one (HIP builds are not farm builds).
_ALWAYS = frozenset({"__CUDACC__", "__NVCC__", "__CUDA_ARCH_LIST__"})
_NEVER = frozenset({"__HIP__", "__HIPCC__", "__HIP_DEVICE_COMPILE__", "__HIP_PLATFORM_AMD__",
                    "__HIP_PLATFORM_HCC__", "USE_ROCM", "__HIP_PLATFORM_NVIDIA__", "__CUDACC_RTC__"})


@dataclass(frozen=True)
class ArchContext:
    """The device pass of nvcc for one image: ``__CUDA_ARCH__`` and its ``a``/``f`` feature macros."""

    cuda_arch: int  # 900 for sm_90
    arch_specific: bool = False  # sm_90a: __CUDA_ARCH_SPECIFIC__, __CUDA_ARCH_FEAT_SM90_ALL
    family_specific: bool = False  # sm_100f (and every 'a'): __CUDA_ARCH_FAMILY_SPECIFIC__

    def symbol(self, name: str) -> int | object | None:
        if name == "__CUDA_ARCH__":
            return self.cuda_arch
        if name == "__CUDA_ARCH_SPECIFIC__":
            return self.cuda_arch if self.arch_specific else UNDEFINED
        if name == "__CUDA_ARCH_FAMILY_SPECIFIC__":
            return self.cuda_arch if (self.family_specific or self.arch_specific) else UNDEFINED
        m = _FEAT.match(name) or _HAS_FEATURE.match(name)
        if m:
            return 1 if self.arch_specific and int(m[1]) * 10 == self.cuda_arch else UNDEFINED
        if name in _ALWAYS:
            return 1
        if name in _NEVER:
            return UNDEFINED
        return None


@dataclass
class Scope:
    """Evaluation scope: an arch context plus the feature macros a codebase derives from it."""

    context: ArchContext
    aliases: Mapping[str, Expr] = field(default_factory=dict)
    _active: set[str] = field(default_factory=set)

    def __call__(self, name: str) -> int | object | None:
        value = self.context.symbol(name)
        if value is not None:
            return value
        if name.endswith(")") and "(" in name:
            return self._expand(name)
        alias = self.aliases.get(name)
        if alias is None or name in self._active:
            return None
        self._active.add(name)
        try:
            result = evaluate(alias, self)
        finally:
            self._active.discard(name)
        if result == 0:
            return UNDEFINED
        return result if result is None else 1

    def _expand(self, call: str) -> int | None:
        """A function-like macro that reads the arch (``CUDA_ARCH_FAMILY(1000)``), expanded."""
        fname, _, arg = call[:-1].partition("(")
        macro = self.aliases.get(fname + "()")
        if macro is None or macro[0] != "macro" or call in self._active:
            return None
        _, params, body = macro
        args = [a.strip() for a in arg.split(",")] if params else []
        if len(args) != len(params):
            return None
        for param, value in zip(params, args, strict=True):
            body = re.sub(rf"\b{re.escape(param)}\b", value, body)
        expr = parse_expr(body)
        if expr is None:
            return None
        self._active.add(call)
        try:
            return evaluate(expr, self)
        finally:
            self._active.discard(call)


@functools.lru_cache(maxsize=4096)
def is_arch_symbol(name: str) -> bool:
    return bool(ARCH_SYMBOL.match(name)) or name.startswith("__CUDA_ARCH_HAS_FEATURE__(")


# --------------------------------------------------------------------------------------------
# Directive structure
# --------------------------------------------------------------------------------------------
@dataclass
class Branch:
    """One branch of a chain: its condition (None for ``#else``), directive line and body lines."""

    cond: Expr | None
    text: str  # the condition as written
    line: int  # line of the directive
    body: tuple[int, int]  # first and last+1 line of the body
    unparsed: bool = False


@dataclass
class Chain:
    branches: list[Branch]
    end_line: int

    @property
    def line(self) -> int:
        return self.branches[0].line

    def has_else(self) -> bool:
        return self.branches[-1].cond is None and not self.branches[-1].unparsed


@dataclass
class Directives:
    chains: list[Chain]
    defines: list[tuple[int, str, str]]  # (line, name, value)
    dead: set[int]  # lines inside #if 0 (and the #else of #if 1)
    directive_lines: set[int]
    functions: list[tuple[int, str, tuple[str, ...], str]] = field(default_factory=list)  # (line, name, params, body)


_DIRECTIVE = re.compile(r"#[ \t]*(\w+)([^\n]*)")


def directive_lines(code: str) -> Iterator[tuple[int, int, str, str]]:
    """(first line, last line, directive word, rest) of each directive, continuations joined."""
    line = 1
    pos = 0
    for m in _DIRECTIVE.finditer(code):
        if not first_on_line(code, m.start()):
            continue
        line += code.count("\n", pos, m.start())
        pos = m.start()
        rest = m[2]
        end = m.end()
        last = line
        while rest.endswith("\\"):  # continued on the next line
            nxt = code.find("\n", end + 1)
            nxt = len(code) if nxt == -1 else nxt
            rest = rest[:-1] + " " + code[end + 1:nxt]
            end = nxt
            last += 1
        yield line, last, m[1], rest


def scan_directives(code: str) -> Directives:
    """Chains and defines of stripped C code (comments and strings already blanked)."""
    chains: list[Chain] = []
    stack: list[Chain] = []
    defines: list[tuple[int, str, str]] = []
    functions: list[tuple[int, str, tuple[str, ...], str]] = []
    lines_seen: set[int] = set()
    n_lines = code.count("\n") + 1
    for number, last, word, raw_rest in directive_lines(code):
        rest = raw_rest.strip()
        lines_seen.update(range(number, last + 1))
        if word in ("if", "ifdef", "ifndef"):
            chain = Chain([], n_lines)
            stack.append(chain)
            chains.append(chain)
            chain.branches.append(_branch(word, rest, number, last))
        elif word in ("elif", "elifdef", "elifndef", "else") and stack:
            chain = stack[-1]
            prev = chain.branches[-1]
            prev.body = (prev.body[0], number)
            chain.branches.append(_branch(word, rest, number, last))
        elif word == "endif" and stack:
            chain = stack.pop()
            prev = chain.branches[-1]
            prev.body = (prev.body[0], number)
            chain.end_line = number
        elif word == "define":
            dm = re.match(r"([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)", rest)
            if dm:
                defines.append((number, dm[1], dm[3]))
                if dm[2]:
                    params = tuple(p.strip() for p in dm[2][1:-1].split(",") if p.strip())
                    functions.append((number, dm[1], params, dm[3]))
    for chain in stack:  # unterminated: body runs to the end of the file
        prev = chain.branches[-1]
        prev.body = (prev.body[0], n_lines + 1)
    dead: set[int] = set()
    for chain in chains:
        for i, branch in enumerate(chain.branches):
            if branch.cond is None:
                value: int | None = 1
            elif identifiers(branch.cond):
                break
            else:
                value = evaluate(branch.cond, lambda _n: None)
            if value is None:
                break
            if value:  # a constant branch taken: the ones after it are dead
                for later in chain.branches[i + 1:]:
                    dead.update(range(*later.body))
                break
            dead.update(range(*branch.body))
    return Directives(chains, defines, dead, lines_seen, functions)


def _branch(word: str, rest: str, number: int, last: int) -> Branch:
    body = (last + 1, last + 1)
    if word == "else":
        return Branch(None, "#else", number, body)
    if word in ("ifdef", "elifdef", "ifndef", "elifndef"):
        name = rest.split(maxsplit=1)[0] if rest.split() else ""
        cond: Expr | None = ("defined", name)
        if word.endswith("ndef"):
            cond = ("u!", cond)
        return Branch(cond, f"#{word} {rest}", number, body)
    cond = parse_expr(rest)
    return Branch(cond if cond is not None else ("id", "__unparsed__"), f"#{word} {rest}", number,
                  body, unparsed=cond is None)
