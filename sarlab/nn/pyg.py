"""Unmodified PyG models on a sharded graph: each ``MessagePassing`` layer's ``propagate`` runs over the shards.

A PyG model's ``forward(x, edge_index[, edge_type])`` is called with the worker's rows of ``x`` and, in place of
``edge_index``, a :class:`ShardedEdges` that carries the worker's :class:`~sarlab.core.shards.ShardedGraph`
(``edge_type``: a :class:`ShardedEdgeTypes`). :func:`attach` puts a forward pre-hook on the model that makes
that call from the trainer's ``model(graph, x[, epoch])``, and sets, on each ``MessagePassing`` instance (never
its class), a ``propagate`` (and ``edge_updater``, and for ``RGCNConv`` a ``forward``) that recognise the
placeholder: with a real ``edge_index`` they call PyG's own methods, so the model still runs as plain PyG.
:func:`sharded` does the same for the length of a ``with`` block and leaves the module as it was.

What runs where: :mod:`sarlab.nn.pyg_propagate` (the generic ``propagate``: the layer's own ``message`` per block
of edges, reduced across blocks by sum/mean/max, the layer's ``update``) and :mod:`sarlab.nn.pyg_rules` (what a
layer does to ``edge_index`` before ``propagate``: GCN's normalisation with global degrees, GAT's self-loops and
softmax over all in-edges, R-GCN's relations). A layer that cannot be distributed exactly raises
:class:`~sarlab.data.validate_data.InputError` with one line naming it and why.
"""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

from torch import nn

from sarlab.data.validate_data import InputError
from sarlab.nn import pyg_rules
from sarlab.nn.pyg_edges import ShardedEdges, ShardedEdgeTypes

__all__ = ["ShardedEdges", "ShardedEdgeTypes", "attach", "sharded", "is_pyg_model", "message_passing_layers"]


def message_passing_layers(module: nn.Module) -> list:
    """The ``torch_geometric`` ``MessagePassing`` submodules of ``module`` (itself included), with their names."""
    from torch_geometric.nn.conv import MessagePassing

    return [(name, m) for name, m in module.named_modules() if isinstance(m, MessagePassing)]


def is_pyg_model(module: nn.Module) -> bool:
    """True when ``module`` has PyG ``MessagePassing`` layers (its forward takes ``(x, edge_index, ...)``)."""
    return bool(message_passing_layers(module))


def _takes_edge_type(module: nn.Module) -> bool:
    """Whether the model's forward wants an ``edge_type`` after ``(x, edge_index)``: a parameter so named, or a third
    positional parameter without a default."""
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 3 and (params[2].name in ("edge_type", "edge_types")
                                 or params[2].default is inspect.Parameter.empty)


def _pre_hook(with_types: bool):
    def hook(module: nn.Module, args: tuple) -> tuple:
        if len(args) < 2 or isinstance(args[0], ShardedEdges) or not hasattr(args[0], "shards"):
            return None  # already a PyG-style call (x, edge_index, ...): leave it
        graph, x = args[0], args[1]
        edges = ShardedEdges(graph)
        return (x, edges, ShardedEdgeTypes(graph)) if with_types else (x, edges)
    return hook


def _patch_layer(label: str, layer) -> list[str]:
    """Set the sharded methods on one layer instance; returns the attribute names set."""
    names = []
    for name, method in pyg_rules.instance_methods(label, layer).items():
        if name in layer.__dict__:
            raise InputError(f"{type(layer).__name__} already has an instance attribute {name!r} (attached twice, "
                             "or set by the model): sarlab cannot route it over the shards")
        object.__setattr__(layer, name, method)
        names.append(name)
    return names


def _label(name: str, layer) -> str:
    """How errors name a layer: ``conv1 (GCNConv)``."""
    return f"{name} ({type(layer).__name__})" if name else type(layer).__name__


class Attachment:
    """What :func:`attach` changed on a model; :meth:`remove` undoes it."""

    def __init__(self, module: nn.Module):
        self.module, self.patched, self.hook = module, [], None

    def remove(self) -> None:
        for layer, names in self.patched:
            for name in names:
                layer.__dict__.pop(name, None)
        self.patched = []
        if self.hook is not None:
            self.hook.remove()
            self.hook = None


def attach(module: nn.Module) -> Attachment:
    """Make ``module`` (a PyG model) callable as ``module(graph, x[, epoch])`` on a sharded graph; each of its
    ``MessagePassing`` instances routes ``propagate`` over the shards when given a :class:`ShardedEdges`.

    Every layer is checked first (:func:`sarlab.nn.pyg_rules.check_layer`): one that cannot run exactly raises
    :class:`InputError` naming it. Returns an :class:`Attachment` whose ``remove()`` restores the module.
    """
    layers = message_passing_layers(module)
    if not layers:
        raise InputError(f"{type(module).__name__} has no torch_geometric MessagePassing layer: not a PyG model")
    positional = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    if len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in positional):
        raise InputError(f"{type(module).__name__}.forward takes {len(positional)} argument(s); sarlab calls a PyG "
                         "model as forward(x, edge_index[, edge_type]) (not forward(data))")
    for name, layer in layers:
        pyg_rules.check_layer(_label(name, layer), layer)
    handle = Attachment(module)
    try:
        for name, layer in layers:
            handle.patched.append((layer, _patch_layer(_label(name, layer), layer)))
        handle.hook = module.register_forward_pre_hook(_pre_hook(_takes_edge_type(module)))
    except BaseException:
        handle.remove()
        raise
    return handle


@contextlib.contextmanager
def sharded(module: nn.Module) -> Iterator[nn.Module]:
    """``with sharded(model): model(graph, x)``: :func:`attach` for the block, the module restored afterwards."""
    handle = attach(module)
    try:
        yield module
    finally:
        handle.remove()
