"""Partition-independent dropout and other small per-node functions."""
from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply) on int64 tensors holding values in [0, 2^32)."""
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def _mix_int(value: int) -> int:
    return int(_mix32(torch.tensor([value & _MASK32], dtype=torch.long))[0])


def uniform_by_id(node_ids: torch.Tensor, width: int, key: tuple[int, ...]) -> torch.Tensor:
    """Uniform [0, 1) numbers ``u[i, f]`` that depend only on (key, global node id, column).

    The same node gets the same numbers whichever worker owns it, so dropout masks, and hence training
    curves, do not depend on the number of workers or the partitioning.
    """
    key_hash = 0x9E3779B9
    for part in key:
        key_hash = _mix_int(key_hash ^ _mix_int(part))
    rows = _mix32((node_ids.to(torch.long) & _MASK32) ^ key_hash).unsqueeze(1)
    cols = _mix32(torch.arange(width, dtype=torch.long) ^ _mix_int(key_hash + 1)).unsqueeze(0)
    hashed = _mix32((rows * 0x9E37 + cols) & _MASK32)
    return hashed.to(torch.float64) * (1.0 / 4294967296.0)


def dropout_by_id(x: torch.Tensor, p: float, node_ids: torch.Tensor, key: tuple[int, ...],
                  training: bool = True) -> torch.Tensor:
    """Inverted dropout whose mask is a function of (key, global node id, feature)."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    keep = uniform_by_id(node_ids, x.shape[1], key) >= p
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))
