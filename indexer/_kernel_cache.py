"""Where numba caches the compiled kernels, for a user who can write neither place numba tries.

The kernels are compiled with ``cache=True``. numba caches them beside their source (``__pycache__``)
or, when that is not writable, in the user's cache directory (``$XDG_CACHE_HOME`` or
``~/.cache``, then ``numba``); with neither (seglog installed by root, run by a service account
without a home) every kernel's definition fails with ``RuntimeError: cannot cache function ...: no
locator available``, and no command that touches the engine runs. :func:`ensure_kernel_cache` then
points numba at a directory of this user's own in the temporary directory. It runs when the
``indexer`` package is imported (the package imports this module first), before any module of
seglog defines a kernel.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "NUMBA_CACHE_DIR"
_SOURCE_TREE = Path(__file__).resolve().parent


def _writable_dir(path: Path) -> bool:
    """Whether numba could cache in ``path``: it creates the directory and then a file in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _own_private_dir(path: Path) -> bool:
    """Whether ``path`` is a real directory of this user that no one else may write (a directory
    someone else made in the shared temporary directory could hold cache files they planted)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        try:
            path.mkdir(mode=0o700)
        except OSError:
            return False
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def ensure_kernel_cache() -> None:
    """Point numba at a cache directory of this user's own when neither the source tree's
    ``__pycache__`` nor the user's cache directory can be written; else leave numba's choice."""
    if os.environ.get(CACHE_DIR_ENV):
        return
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path("~/.cache").expanduser()) / "numba"
    if _writable_dir(_SOURCE_TREE / "__pycache__") or _writable_dir(user_cache):
        return
    own = Path(tempfile.gettempdir()) / f"seglog-numba-cache-{os.geteuid()}"
    if not _own_private_dir(own):
        own = Path(tempfile.mkdtemp(prefix="seglog-numba-cache-"))
    os.environ[CACHE_DIR_ENV] = str(own)
    config = sys.modules.get("numba.core.config")  # numba read the environment already: tell it too
    if config is not None:
        config.CACHE_DIR = str(own)  # type: ignore[attr-defined]
    logger.debug("numba caches compiled kernels in %s (neither %s nor %s is writable)", own, _SOURCE_TREE, user_cache)


ensure_kernel_cache()
