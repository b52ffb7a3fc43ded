r"""A PyG layer's ``propagate`` over the shards: its own ``message`` per block of edges, reduced exactly across blocks.

.. math::
    \mathbf{x}'_i = \gamma\Big(\bigoplus_{j \to i} \phi(\mathbf{x}_i, \mathbf{x}_j)\Big),
    \qquad \bigoplus \in \{\text{sum}, \text{mean}, \text{max}\}

The ``*_j`` arguments of ``message`` are node tensors of the sources: their rows are what peers exchange (packed
side by side into one ``[rows, F]`` tensor); the ``*_i`` ones are the worker's destination rows. Each block of edges
(a shard in ``sar``/``sa``, all in-edges at once in ``oneshot``) calls the layer's ``message`` on the gathered rows;
the engine's :class:`~sarlab.core.aggregators.Aggregation` reduces blocks into the running sum/mean/max (the mean
divides by the global in-degree). A message that only copies ``x_j`` (SAGE, GIN, GraphConv, an unnormalised GCN)
is SAR's case 1: the backward needs no source rows. Any other message is case 2: ``sar`` re-fetches each block's
rows in the backward pass and rebuilds its messages under autograd; the layer's parameters that the message reads
are given to the engine as the aggregation's parameters, so their gradients come back exactly.
"""
from __future__ import annotations

import contextlib
import math

import torch

from sarlab.core.aggregators import Aggregation
from sarlab.data.validate_data import InputError

#: PyG's aggregator names -> the engine's reductions
REDUCES = {"add": "sum", "sum": "sum", "mean": "mean", "max": "max"}

#: message arguments PyG fills from the edge index itself; none of them is available per block except the sizes
_EDGE_SPECIALS = ("index", "ptr", "edge_index", "edge_index_i", "edge_index_j", "adj_t", "size")


def _identity_messages() -> tuple:
    """``message`` methods that return ``x_j`` unchanged (with ``edge_weight`` None where they take one)."""
    from torch_geometric.nn import conv

    return (conv.MessagePassing.message, conv.SAGEConv.message, conv.GINConv.message, conv.GraphConv.message,
            conv.GCNConv.message)


def is_identity_message(layer) -> bool:
    return type(layer).message in _identity_messages()


def _split_pair(value, side: int):
    """PyG's convention: a ``(source, destination)`` pair gives ``side`` 0 to ``*_j``, 1 to ``*_i``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InputError(f"a propagate argument is a sequence of {len(value)}, PyG expects (source, target)")
        return value[side]
    return value


class Packing:
    """Node tensors laid side by side as one ``[rows, F]`` matrix, and taken apart again per edge."""

    def __init__(self, named: list):
        self.names = [name for name, _ in named]
        self.tails = [tuple(t.shape[1:]) for _, t in named]
        self.widths = [math.prod(tail) for tail in self.tails]
        self.tensors = [t for _, t in named]

    def matrix(self) -> torch.Tensor | None:
        if not self.tensors:
            return None
        flat = [t.reshape(t.shape[0], -1) for t in self.tensors]
        return flat[0] if len(flat) == 1 else torch.cat(flat, 1)

    def unpack(self, rows: torch.Tensor | None) -> dict:
        out, first = {}, 0
        for name, tail, width in zip(self.names, self.tails, self.widths):
            out[name] = rows[:, first:first + width].reshape(rows.shape[0], *tail)
            first += width
        return out


@contextlib.contextmanager
def substituted(layer, names: list, tensors: tuple):
    """The layer's parameters ``names`` replaced by ``tensors`` for the block (the engine's leaves, so that
    autograd sees what the message reads); restored afterwards."""
    saved = []
    try:
        for name, tensor in zip(names, tensors):
            owner_name, _, attr = name.rpartition(".")
            owner = layer.get_submodule(owner_name) if owner_name else layer
            saved.append((owner, attr, owner._parameters[attr]))
            owner._parameters[attr] = tensor
        yield
    finally:
        for owner, attr, original in reversed(saved):
            owner._parameters[attr] = original


def _message_arguments(label: str, layer, graph, kwargs: dict) -> tuple[list, list, dict]:
    """(source tensors, destination tensors, constant arguments) of ``layer.message``, by name."""
    src, dst, const = [], [], {}
    for name in layer.inspector.get_param_names("message"):
        if name in _EDGE_SPECIALS:
            raise InputError(f"{label}: its message reads `{name}` (an operation over each node's in-edges, such as a "
                             "softmax): sarlab streams in-edges in blocks and has no rule for this layer")
        if name in ("size_i", "dim_size"):
            const[name] = graph.num_nodes
            continue
        if name == "size_j":
            const[name] = graph.num_src
            continue
        if name.endswith(("_i", "_j")):
            side = 0 if name.endswith("_j") else 1
            value = _split_pair(kwargs.get(name[:-2]), side)
            if value is None:
                const[name] = None
                continue
            if not torch.is_tensor(value) or not value.is_floating_point():
                raise InputError(f"{label}: message argument {name} is not a floating-point node tensor")
            rows = graph.num_src if side == 0 else graph.num_nodes
            if value.shape[0] != rows:
                raise InputError(f"{label}: {name} has {value.shape[0]} rows, the worker has {rows} "
                                 f"{'source' if side == 0 else 'destination'} rows (node_dim must be 0)")
            (src if side == 0 else dst).append((name, value))
            continue
        value = kwargs.get(name)
        if torch.is_tensor(value):
            raise InputError(f"{label}: message argument `{name}` is a per-edge tensor; on a worker edges live in the "
                             "shards and there is no per-edge tensor to hand it (pass node tensors, or none)")
        const[name] = value
    return src, dst, const


def check_propagate(label: str, layer, size) -> str:
    """The engine's reduction for ``layer``; :class:`InputError` where its propagate cannot be distributed."""
    from torch_geometric.nn.conv import MessagePassing

    if layer.flow != "source_to_target":
        raise InputError(f"{label}: flow={layer.flow!r}; sarlab shards in-edges (flow='source_to_target')")
    if not isinstance(layer.aggr, str) or layer.aggr not in REDUCES:
        raise InputError(f"{label}: aggr={layer.aggr!r}; sarlab reduces blocks of edges exactly with "
                         f"{', '.join(sorted(REDUCES))} only")
    if type(layer).aggregate is not MessagePassing.aggregate:
        raise InputError(f"{label}: overrides aggregate(); sarlab reduces blocks of edges itself (set aggr instead)")
    if size is not None:
        raise InputError(f"{label}: propagate was given size={size}; sarlab's sharded graph sets the sizes")
    return REDUCES[layer.aggr]


def sharded_propagate(layer, label: str, edges, size=None, **kwargs) -> torch.Tensor:
    """``layer.propagate(edge_index=edges, **kwargs)`` over ``edges.graph``'s shards (see the module docstring)."""
    graph = edges.graph
    reduce = check_propagate(label, layer, size)
    src, dst, const = _message_arguments(label, layer, graph, kwargs)
    if not src:
        raise InputError(f"{label}: its message reads no source tensor (*_j): nothing to propagate")
    source, target = Packing(src), Packing(dst)
    backend = graph.config.kernels
    if is_identity_message(layer) and const.get("edge_weight") is None and len(src) == 1 and not dst:
        out = graph.aggregate(Aggregation(reduce, backend=backend), source.matrix())
        out = out.reshape(out.shape[0], *source.tails[0])
    else:
        names = [n for n, p in layer.named_parameters() if p.requires_grad]
        params = tuple(p for p in layer.parameters() if p.requires_grad)

        def message(x_j, x_i, block_params):
            args = dict(const, **source.unpack(x_j), **(target.unpack(x_i) if x_i is not None else {}))
            with substituted(layer, names, block_params):
                return layer.message(**args)

        out = graph.aggregate(Aggregation(reduce, message=message, backend=backend), source.matrix(),
                              target.matrix(), params)
    return _update(label, layer, out, kwargs)


def _update(label: str, layer, out: torch.Tensor, kwargs: dict) -> torch.Tensor:
    from torch_geometric.nn.conv import MessagePassing

    if type(layer).update is MessagePassing.update:
        return out
    args = {}
    for name in layer.inspector.get_param_names("update", exclude=["inputs"]):
        if name.endswith(("_i", "_j")) or name in _EDGE_SPECIALS:
            raise InputError(f"{label}: update() reads `{name}`, a per-edge value; sarlab calls update on node rows")
        args[name] = kwargs.get(name)
    return layer.update(out, **args)
