"""Big-endian integer access for the numba kernels (numba has no non-native byte-order arrays).

Two views of the same bytes are in use, so there are two families:

* byte buffers (``uint8`` arrays: ``.log`` contents, encoder output): :func:`get_be` and
  :func:`put_be` read and write a signed big-endian integer of 1 to 8 bytes at any position;
* word arrays (an ``.index`` / ``.timeindex`` mapping viewed as native ``uint32``, whose fields are
  4-byte aligned): :func:`word_int32` and :func:`word_int64` byte-swap whole words, which is one
  instruction per word.

Every helper is ``inline="always"``, so callers compile them into their own code. Numba's cache
does not notice a change to an inlined helper in another module: after editing this file, delete
the ``__pycache__/*.nbi`` / ``*.nbc`` files of the kernel modules importing it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_TWO_POW_31 = 1 << 31
_TWO_POW_32 = 1 << 32
_U1 = np.uint64(1)


@njit(cache=True, inline="always")
def get_be(buf: np.ndarray, pos: int, width: int) -> int:
    """Signed big-endian integer of ``width`` bytes at ``buf[pos]``."""
    u = np.uint64(0)
    for i in range(width):
        u = (u << np.uint64(8)) | np.uint64(buf[pos + i])
    bits = np.uint64(8 * width)
    if width < 8 and u >= (_U1 << (bits - _U1)):
        return int(np.int64(u) - (np.int64(1) << np.int64(bits)))
    return int(np.int64(u))


@njit(cache=True, inline="always")
def put_be(out: np.ndarray, pos: int, value: int, width: int) -> None:
    """Big-endian two's complement ``value`` in ``width`` bytes at ``out[pos]``."""
    u = np.uint64(value) if value >= 0 else ~np.uint64(~value)
    for i in range(width - 1, -1, -1):
        out[pos + i] = np.uint8(u & np.uint64(0xFF))
        u >>= np.uint64(8)


@njit(cache=True, inline="always")
def bswap32(word: np.uint32) -> int:
    """A big-endian uint32 read natively, as the non-negative int64 it encodes."""
    w = np.int64(word)
    return int(((w & 0xFF) << 24) | ((w & 0xFF00) << 8) | ((w >> 8) & 0xFF00) | ((w >> 24) & 0xFF))


@njit(cache=True, inline="always")
def word_int32(words: np.ndarray, i: int) -> int:
    """Word ``i`` as a signed big-endian int32."""
    u = bswap32(words[i])
    if u >= _TWO_POW_31:
        u -= _TWO_POW_32
    return u


@njit(cache=True, inline="always")
def word_int64(words: np.ndarray, i: int) -> int:
    """Words ``i`` and ``i+1`` as a signed big-endian int64 (two's complement wrap on the shift)."""
    return (bswap32(words[i]) << 32) | bswap32(words[i + 1])
