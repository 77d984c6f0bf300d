from . import _ext  # noqa: F401
