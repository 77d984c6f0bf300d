"""What is code: comments, string literals and dead ``#if 0`` blocks are blanked out.

Every function here keeps offsets and line numbers: a blanked character becomes a space and
newlines stay, so a match in the stripped text is at the same line as in the file. String
literals keep their quotes (so ``asm("...")`` stays recognisable) and lose their content.
"""

from __future__ import annotations

import io
import re
import tokenize
from itertools import accumulate

_C_TOKENS = re.compile(
    r"""
    (?=[/"'R])                                          # cheap guard: every token starts so
    (?:
      (?P<lc>//[^\n\\]*(?:\\.[^\n\\]*)*)                  # line comment (a trailing backslash continues it)
    | (?P<bc>/\*[^*]*\*+(?:[^/*][^*]*\*+)*/)               # block comment
    | (?P<raw>\bR"(?P<d>[^\s()\\]{0,16})\(.*?\)(?P=d)")      # raw string literal
    | (?P<str>"[^"\\\n]*(?:\\.[^"\\\n]*)*")                 # string literal
    | (?P<chr>'(?:[^'\\\n]|\\.){1,8}')                     # character literal
    )
    """,
    re.DOTALL | re.VERBOSE,
)


def _blank(text: str) -> str:
    if "\n" not in text:
        return " " * len(text)
    return "\n".join(" " * len(part) for part in text.split("\n"))


_TRAILING_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/")
_HASH_TO_EOL = re.compile(r"#[^\n]*")


def first_on_line(text: str, pos: int) -> bool:
    """Whether only spaces and tabs precede ``pos`` on its line. A directive is a ``#`` so placed:
    finding each ``#`` and looking back is ten times faster on a large header than a MULTILINE
    ``^[ \t]*#``, which re tries at every offset of the text."""
    if pos == 0 or text[pos - 1] == "\n":  # most directives start their line
        return True
    return not text[text.rfind("\n", 0, pos) + 1:pos].strip(" \t")


def strip_directive_comments(text: str) -> str:
    """Comments blanked on preprocessor lines only: enough to read a library's conditions fast."""
    pieces: list[str] = []
    done = 0
    for m in _HASH_TO_EOL.finditer(text):
        if "/" in m.group() and first_on_line(text, m.start()):
            pieces.append(text[done:m.start()])
            pieces.append(_TRAILING_COMMENT.sub(lambda c: _blank(c.group()), m.group()))
            done = m.end()
    return "".join([*pieces, text[done:]]) if pieces else text


def _blank_c(match: re.Match[str]) -> str:
    text = match.group()
    if match.lastgroup in ("str", "chr") and len(text) >= 2:
        return text[0] + _blank(text[1:-1]) + text[-1]
    if match.lastgroup == "raw":
        return '"' + _blank(text[1:-1]) + '"'
    return _blank(text)


def strip_c(text: str) -> str:
    """C/C++/CUDA source with comments and the content of string/char literals blanked."""
    return _C_TOKENS.sub(_blank_c, text)


_HASH_COMMENT = re.compile(r"""("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|#[^\n]*""")


def strip_hash_comments(text: str) -> str:
    """CMake, Makefile and TOML text with ``#`` comments blanked; strings (and what they hold) kept."""
    return _HASH_COMMENT.sub(lambda m: m.group(1) or _blank(m.group()), text)


def strip_python_comments(text: str) -> str:
    """Python text with comments blanked; strings kept (build files pass flags as strings)."""
    lines = text.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return strip_hash_comments(text)
    for tok in reversed(tokens):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            line = lines[row - 1]
            end = tok.end[1]
            lines[row - 1] = line[:col] + " " * (end - col) + line[end:]
    return "".join(lines)


def blank_lines(text: str, dead: set[int], *, keep_offsets: bool = False) -> str:
    """``text`` with the given 1-based lines blanked: kept as empty lines, or with
    ``keep_offsets`` as spaces (every offset still at the same place)."""
    if not dead:
        return text
    lines = text.split("\n")
    for number in dead:
        if 0 < number <= len(lines):
            lines[number - 1] = " " * len(lines[number - 1]) if keep_offsets else ""
    return "\n".join(lines)


def line_starts(text: str) -> list[int]:
    """Offsets at which each line starts, for offset -> line lookups with bisect."""
    # split and accumulate run in C: a find() per line was a tenth of a cold lint's time
    return [0, *accumulate(len(line) + 1 for line in text.split("\n")[:-1])]
