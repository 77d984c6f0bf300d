"""The arch-gate lint: sources checked against the declared arch list at matrix time.

- :func:`lint_tree`: lint a directory against an arch list.
- :func:`lint_source`: fetch a recipe source (:mod:`farm.source.fetch`) and lint it.
- :func:`lint_cached`: the same for a fetched :class:`~farm.source.fetch.SourceTree`, cached by
  (source identity, lint version, arch list, ignores), as the matrix calls it.

These and the report's types are imported from :mod:`farm.lint.api`. What counts as compiled is
decided in :mod:`farm.lint.compiled`; the rules are in :mod:`farm.lint.rules`. This package
module imports nothing: ``farm lint``'s remembered answer (:mod:`farm.lint.memo`) loads without
the rules.
"""
