"""Aggregators: how messages from one source shard are reduced into destination rows.

An aggregator streams shards into a running state (``init`` / ``accumulate``), turns the state into the
output (``finalize``), and gives each shard's share of the gradient from the final statistics
(``shard_vjp``), so that a shard can be rematerialized alone in the backward pass. ``linear``
aggregators (sum or mean of copied source rows) are SAR's *case 1*: their source gradient is
``A_q^T scale(grad_out)`` and needs no source features, so nothing is re-fetched. ``max`` streams through
the kernels' running max (``kernels.csr_max_shard`` / ``kernels.csr_max_backward``), which write no
per-edge tensor for copied rows.

The extension point for new layers is :class:`Aggregation` with a ``message`` function.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from sarlab import kernels
from sarlab.core import phases
from sarlab.core.shards import Shard

REDUCES = ("sum", "mean", "max")


@phases.tagged("graph_structure")
def cached_transpose(shard: Shard, build: str) -> kernels.Transpose:
    """The shard's CSC (per source row, the destinations it feeds), built once and cached on the shard; every
    caller gets the cached one, whichever backend built it (the structure is the same).

    Args:
        shard: the shard.
        build: ``cpp`` or ``torch``: the transpose kernel that builds it on first use.
    """
    transpose = shard.cache.get("csc")
    if transpose is None:
        transpose = shard.cache["csc"] = kernels.csr_transpose(shard.rowptr, shard.src, shard.num_src, build)
    return transpose


def shard_transpose(shard: Shard, backend: str | None) -> kernels.Transpose | None:
    """The shard's cached CSC for the C++ backward kernels (:func:`cached_transpose`); None when ``backend``
    resolves to torch, whose fused-path kernels need none.

    Args:
        shard: the shard.
        backend: ``cpp``, ``torch``, ``auto`` or None (see :func:`kernels.backend`).
    """
    if kernels.backend(backend) != "cpp":
        return None
    return cached_transpose(shard, "cpp")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """``[n, ...]`` as ``[n, F]`` (a view when ``t`` is contiguous)."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))


class Aggregation:
    """``out_i = reduce_{j -> i} message(x_j, x_i, params)``, with ``reduce`` in sum, mean, max.

    With ``message=None`` the message is the source row itself (``x_j``); sum and mean of copied rows are
    linear (case 1). ``mean`` divides by the global in-degree (0 for nodes without in-edges); ``max``
    gives 0 for nodes without in-edges and splits the gradient evenly among tied maxima, as
    ``torch.scatter_reduce(..., 'amax')`` (PyG's max aggregation) does.

    ``max`` keeps, per node and feature, the running max and how many in-edges attain it (int32), updated
    in place by ``kernels.csr_max_shard``; its forward runs with autograd off (the engine's Functions call
    ``accumulate`` inside their forward). Without a message its backward is ``kernels.csr_max_backward``
    over the shard's edges; with one it goes through :meth:`surrogate`.

    Args:
        reduce: ``sum``, ``mean`` or ``max``.
        message: optional ``f(x_j [E, ...], x_i [E, ...] or None, params) -> [E, ...]``; must be
            differentiable; rows are gathered per edge by the engine.
        backend: kernels backend of ``max``: ``cpp``, ``torch``, ``auto`` or None (see
            :func:`kernels.backend`); layers pass their engine config's ``kernels``.
    """

    def __init__(self, reduce: str = "sum", message: Callable | None = None, backend: str | None = None):
        if reduce not in REDUCES:
            raise ValueError(f"unknown reduce {reduce!r}: choose one of {', '.join(REDUCES)}")
        self.reduce, self.message = reduce, message
        self.backend = None if backend == "auto" else backend  # None: $SARLAB_KERNELS decides
        self.linear = message is None and reduce in ("sum", "mean")

    # --- messages -------------------------------------------------------------------------------
    def _messages(self, shard: Shard, rows: torch.Tensor, dst_x, params) -> torch.Tensor:
        x_j = rows[shard.src]
        if self.message is None:
            return x_j
        x_i = None if dst_x is None else dst_x[shard.dst]
        return self.message(x_j, x_i, params)

    def _degree(self, graph, like: torch.Tensor) -> torch.Tensor:
        deg = graph.in_degree.clamp(min=1).to(like.dtype)
        return deg.view(-1, *([1] * (like.dim() - 1)))

    # --- forward, shard by shard ----------------------------------------------------------------
    def init(self, num_dst: int, src_x: torch.Tensor, dst_x, params, shard: Shard) -> list:
        if self.message is None:
            tail = src_x.shape[1:]
        else:  # probe the message shape on zero edges
            tail = self._messages(_empty_like_shard(shard), src_x[:0], dst_x, params).shape[1:]
        if self.reduce == "max":
            best, count = kernels.empty_max_state(num_dst, math.prod(tail), src_x)
            return [best.view(num_dst, *tail), count.view(num_dst, *tail)]
        return [torch.zeros((num_dst, *tail), dtype=src_x.dtype)]

    def accumulate(self, state: list, shard: Shard, rows: torch.Tensor, dst_x, params) -> list:
        if shard.num_edges == 0:
            return state
        if self.linear:
            return [shard.spmm(rows, out=state[0])]
        if self.reduce == "max":
            if self.message is None:  # copied rows: the kernel reads them through the shard's columns
                values, columns = rows, shard.src
            else:  # one message per edge, in the shard's (destination-sorted) edge order
                values = self._messages(shard, rows, dst_x, params)
                columns = torch.arange(shard.num_edges, dtype=torch.long)
            best, count = state
            kernels.csr_max_shard(shard.rowptr, columns, _flat(values), (_flat(best), _flat(count)),
                                  backend=self.backend, inplace=True)
            return state
        msg = self._messages(shard, rows, dst_x, params)
        return [state[0].index_add(0, shard.dst, msg)]

    def finalize(self, graph, state: list, dst_x, params) -> tuple[torch.Tensor, tuple]:
        if self.reduce == "sum":
            return state[0], ()
        if self.reduce == "mean":
            return state[0] / self._degree(graph, state[0]), ()
        best, count = state
        return torch.where(count > 0, best, torch.zeros_like(best)), (best, count)

    # --- backward, shard by shard ---------------------------------------------------------------
    def linear_scale(self, graph, grad_out: torch.Tensor) -> torch.Tensor:
        """For case 1: ``scale^T grad_out`` such that the source gradient is ``A_q^T`` of it."""
        return grad_out / self._degree(graph, grad_out) if self.reduce == "mean" else grad_out

    def surrogate(self, graph, saved: tuple, out: torch.Tensor, shard: Shard, rows, dst_x, params):
        """A differentiable function of this shard's inputs whose VJP with ``grad_out`` is the shard's
        exact share of the gradient (the final statistics in ``saved`` held constant)."""
        msg = self._messages(shard, rows, dst_x, params)
        acc = torch.zeros((shard.num_dst, *msg.shape[1:]), dtype=msg.dtype)
        if self.reduce == "max":
            best, count = saved
            hit = (msg.detach() == best[shard.dst]) & (count[shard.dst] > 0)
            weight = hit.to(msg.dtype) / count[shard.dst].clamp(min=1)
            return acc.index_add(0, shard.dst, msg * weight)
        acc = acc.index_add(0, shard.dst, msg)
        return acc / self._degree(graph, acc) if self.reduce == "mean" else acc

    def shard_vjp(self, graph, saved: tuple, out: torch.Tensor, shard: Shard, rows: torch.Tensor, dst_x,
                  params: tuple, grad_out: torch.Tensor):
        """Gradients of this shard's contribution: (rows, dst_x or None, params)."""
        if self.linear:
            return shard.spmm(self.linear_scale(graph, grad_out), transpose=True), None, ()
        if self.reduce == "max" and self.message is None:
            best, count = saved
            grad_rows = kernels.csr_max_backward(shard.rowptr, shard.src, _flat(rows), _flat(best), _flat(count),
                                                 _flat(grad_out), backend=self.backend,
                                                 transpose=shard_transpose(shard, self.backend))
            return grad_rows.view(rows.shape), None, ()
        return vjp_via_surrogate(self, graph, saved, out, shard, rows, dst_x, params, grad_out)


def vjp_via_surrogate(agg, graph, saved, out, shard, rows, dst_x, params, grad_out):
    """Generic ``shard_vjp``: rebuild the shard's surrogate under autograd and pull ``grad_out`` back."""
    with torch.enable_grad():
        rows_leaf = rows.detach().requires_grad_(True)
        dst_leaf = None if dst_x is None else dst_x.detach().requires_grad_(dst_x.is_floating_point())
        param_leaves = tuple(p.detach().requires_grad_(True) for p in params)
        value = agg.surrogate(graph, saved, out, shard, rows_leaf, dst_leaf, param_leaves)
        leaves = [rows_leaf] + ([dst_leaf] if dst_leaf is not None and dst_leaf.requires_grad else []) \
            + list(param_leaves)
        grads = torch.autograd.grad(value, leaves, grad_out, allow_unused=True)
    grads = [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, grads)]
    g_rows = grads[0]
    g_dst = grads[1] if dst_leaf is not None and dst_leaf.requires_grad else None
    g_params = tuple(grads[len(grads) - len(param_leaves):]) if param_leaves else ()
    return g_rows, g_dst, g_params


def _empty_like_shard(shard: Shard) -> Shard:
    return Shard(shard.peer, shard.src[:0], shard.dst[:0], 0, 0)
