"""The arch-gate lint: sources checked against the declared arch list at matrix time.

Its entry points and the report's types are imported from :mod:`farm.lint.api`, which says what
each does. This package module imports nothing: ``farm lint``'s remembered answer
(:mod:`farm.lint.memo`) loads without the rules.
"""
