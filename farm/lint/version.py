"""The lint's version: what a cached verdict was made with.

Kept apart from the rest of :mod:`farm.lint` and reading files only (importing none). A remembered
``farm lint`` answer (:mod:`farm.lint.memo`) does not compute this digest: it stats farm's modules,
this one included, instead.
"""

from __future__ import annotations

import hashlib
import os


def _code_digest() -> str:
    """A digest of the lint's code and of the models it judges with (the driver model, the arch
    lists): any change to either invalidates cached results, even one nobody remembered to version."""
    here = os.path.dirname(os.path.abspath(__file__))
    model = os.path.join(os.path.dirname(here), "model")
    paths = [os.path.join(here, n) for n in sorted(os.listdir(here)) if n.endswith(".py")]
    digest = hashlib.sha256()
    for path in [*paths, os.path.join(model, "driver.py"), os.path.join(model, "arch.py")]:
        with open(path, "rb") as fh:
            digest.update(os.path.basename(path).encode() + b"\0" + fh.read())
    return digest.hexdigest()[:12]


# Bumped on a deliberate semantic change of the rules; the code digest catches the rest.
RULES_VERSION = "2"
LINT_VERSION = f"{RULES_VERSION}+{_code_digest()}"
