"""One module per ``farm`` command: ``configure(parser)`` and ``run(args) -> int``."""
