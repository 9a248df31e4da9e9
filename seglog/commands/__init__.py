"""The ``seglog`` subcommands, one module each, imported lazily by :mod:`seglog.cli`.

Every module exposes ``add_arguments(parser: argparse.ArgumentParser) -> None`` and
``run(args: argparse.Namespace) -> int`` (the exit code); its docstring is the command's
``--help`` description. Errors are raised (``SeglogError``, ``OSError``, ``ValueError``), never
printed: :func:`seglog.cli.main` turns them into one stderr line and exit code 1.
"""
