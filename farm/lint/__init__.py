"""The arch-gate lint (DESIGN §4.5): sources checked against the declared arch list at matrix time.

- :func:`lint_tree`: lint a directory against an arch list.
- :func:`lint_source`: fetch a recipe source (:mod:`farm.source.fetch`) and lint it.
- :func:`lint_cached`: the same for a fetched :class:`~farm.source.fetch.SourceTree`, cached by
  (source identity, lint version, arch list, ignores), as the matrix calls it.

What counts as compiled is decided in :mod:`farm.lint.compiled`; the rules are in
:mod:`farm.lint.rules`. The names below live in :mod:`farm.lint.api` and are imported on first
use, so that a submodule (the cached answer of ``farm lint``, :mod:`farm.lint.memo`) loads without
the rules, and without the digest of the lint's code that :data:`LINT_VERSION` holds.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing would cost the warm `farm lint` its time
if TYPE_CHECKING:
    from farm.lint.api import (
        BuildScope,
        Finding,
        LibrarySummary,
        LintReport,
        Rule,
        Severity,
        lint_cached,
        lint_index,
        lint_source,
        lint_tree,
    )
    from farm.lint.version import LINT_VERSION

__all__ = [
    "LINT_VERSION", "BuildScope", "Finding", "LibrarySummary", "LintReport", "Rule", "Severity",
    "lint_cached", "lint_index", "lint_source", "lint_tree",
]


def __getattr__(name: str) -> object:
    if name == "LINT_VERSION":
        from farm.lint import version

        return version.LINT_VERSION
    if name in __all__:
        from farm.lint import api

        return getattr(api, name)
    raise AttributeError(f"module 'farm.lint' has no attribute {name!r}")
