"""A user's own model: checked in the caller, shipped to the workers by value, built there with the run's seed.

A *model function* is a callable taking no argument or ``(in_dim, num_classes)`` (a class works too) that
returns a ``torch.nn.Module`` whose forward takes ``(graph, x)``, or ``(graph, x, epoch)`` as the built-in
:class:`~sarlab.nn.model.GNN` does. Its layers reach the other workers only through the graph object
(``graph.aggregate(Aggregation(...), h)``, ``graph.in_degree``, ``graph.dst(h)``, ``graph.all_reduce``), as in
single-process code. It is pickled with cloudpickle, so a function or class defined in a notebook cell or in a
script's ``__main__`` reaches the worker processes. Every rank calls it under the same seed
(``ModelConfig.seed``), so the replicas start from the same parameters; then each rank seeds its global RNG,
which the model's own randomness (``F.dropout``) draws from, from the seed and its rank (:func:`rank_seed`).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import field, fields, is_dataclass, make_dataclass
from types import ModuleType

import cloudpickle
import torch
from torch import nn

from sarlab.data.validate_data import InputError
from sarlab.nn import pyg
from sarlab.nn.model import ModelConfig
from sarlab.training.trainer import DTYPES, Trainer


def _unknown_columns() -> list:
    """ModelConfig's architecture fields, each at its type's zero (a user's model has none of them)."""
    return [(f.name, type(f.default), field(default=type(f.default)())) for f in fields(ModelConfig)
            if f.name not in ("model", "seed")]


#: What the training loop and the metric records read from ``model.cfg`` for a user's model: its name
#: (``custom:ClassName``, the records' ``model`` column) and seed; the architecture columns (ModelConfig's other
#: fields, mirrored from it) are unknown (0, '' or False).
CustomModelConfig = make_dataclass("CustomModelConfig", [("model", str), *_unknown_columns(),
                                                         ("seed", int, field(default=0))],
                                   frozen=True, namespace={"__module__": __name__})


#: top-level packages the workers import themselves (never shipped by value)
_OURS = ("sarlab", "real", "kernels", "simulator")


def _user_module(model_fn: Callable) -> ModuleType | None:
    """The module that defines ``model_fn`` when it is the user's own code (not ``__main__``, which cloudpickle
    ships by value anyway, nor an installed library or sarlab): a worker may not find it on its path."""
    name = getattr(model_fn, "__module__", None) or ""
    module = sys.modules.get(name)
    if module is None or name == "__main__" or name.partition(".")[0] in _OURS:
        return None
    origin = os.path.abspath(getattr(module, "__file__", None) or "")
    installed = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    if not origin or any(origin.startswith(os.path.abspath(p) + os.sep) for p in installed):
        return None
    return module


def pack(model_fn: Callable) -> bytes:
    """``model_fn`` as bytes, by cloudpickle; the module defining it travels by value when it is the user's own
    (a notebook cell, a script's ``__main__``, a file beside it), by reference when it is an installed library.
    """
    if not callable(model_fn):
        raise InputError(f"model_fn must be a callable returning a torch.nn.Module, got {type(model_fn).__name__}")
    module = _user_module(model_fn)
    if module is not None:
        cloudpickle.register_pickle_by_value(module)
    try:
        with _without_pyg_templates({"__main__"} | ({module.__name__} if module is not None else set())):
            return cloudpickle.dumps(model_fn)
    except Exception as err:
        raise InputError(f"model_fn cannot be shipped to the workers: pickling it failed ({err.__class__.__name__}: "
                         f"{err}); build unpicklable things (open files, locks, process groups) inside it") from err
    finally:
        if module is not None:
            cloudpickle.unregister_pickle_by_value(module)


#: what PyG's first instance of a class generates into it: (method, its collect helper)
_PYG_TEMPLATED = (("propagate", "collect"), ("edge_updater", "edge_collect"))


@contextlib.contextmanager
def _without_pyg_templates(modules: set):
    """PyG's ``MessagePassing`` subclasses defined in ``modules`` (shipped by value) without the methods PyG
    generated into their class on first use (``propagate`` from a module a worker cannot import), for the
    pickling; restored afterwards. Each worker's PyG generates its own on first use."""
    from torch_geometric.nn.conv import MessagePassing

    saved, pending = [], list(MessagePassing.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__ not in modules:
            continue
        for base, helper in _PYG_TEMPLATED:
            keys = [k for k in (base, f"_orig_{base}", f"_jinja_{base}", helper) if k in cls.__dict__]
            if f"_orig_{base}" not in keys:
                continue
            values = {k: cls.__dict__[k] for k in keys}
            saved.append((cls, values))
            for k in keys:
                delattr(cls, k)
            if getattr(cls, base) is not values[f"_orig_{base}"]:
                setattr(cls, base, values[f"_orig_{base}"])
    try:
        yield
    finally:
        for cls, values in reversed(saved):
            for k, v in values.items():
                setattr(cls, k, v)


def unpack(blob: bytes) -> Callable:
    """The model function :func:`pack` packed; its defining module, when this process cannot import it (it came
    by value), is registered as a stand-in holding the function's globals: PyG's ``MessagePassing`` reads
    ``sys.modules[cls.__module__]`` to resolve its methods' type hints."""
    model_fn = cloudpickle.loads(blob)
    name = getattr(model_fn, "__module__", None)
    if name and name not in sys.modules and name != "__main__":
        with contextlib.suppress(Exception):  # the user's own module, when this process can import it
            importlib.import_module(name)
    if name and name not in sys.modules:
        functions = [model_fn] + [v for v in vars(model_fn).values() if inspect.isfunction(v)] \
            if isinstance(model_fn, type) else [model_fn]
        stand_in = ModuleType(name)
        for function in functions:
            stand_in.__dict__.update(getattr(function, "__globals__", {}))
        stand_in.__name__, stand_in.__sarlab_stand_in__ = name, True
        sys.modules[name] = stand_in
    return model_fn


def factory_path(model_fn: Callable) -> str | None:
    """``module:qualname`` of ``model_fn`` when another process can import it from there (None for one defined in
    ``__main__``, a notebook, a function's body, or a module this process only has by value)."""
    name, qualname = getattr(model_fn, "__module__", None), getattr(model_fn, "__qualname__", "")
    module = sys.modules.get(name or "")
    if not name or name == "__main__" or "<" in qualname or module is None \
            or getattr(module, "__sarlab_stand_in__", False):
        return None
    found = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{name}:{qualname}" if found is not None else None


def import_factory(path: str) -> Callable:
    """The model function at ``module:qualname`` (see :func:`factory_path`); :class:`InputError` if it is gone."""
    name, _, qualname = path.partition(":")
    try:
        found = importlib.import_module(name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as err:
        raise InputError(f"the model was built by {path}, which cannot be imported here ({err}); pass the model "
                         "function: sarlab.load_model(path, model_fn=...)") from err
    return found


def _wants_dims(model_fn: Callable) -> bool:
    """True when ``model_fn`` takes ``(in_dim, num_classes)``, False when it takes nothing."""
    try:
        params = list(inspect.signature(model_fn).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): call it without arguments
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 2:
        return True
    if any(p.default is p.empty for p in positional):
        raise InputError(f"model_fn {_name(model_fn)} takes one argument; it must take none or "
                         "(in_dim, num_classes)")
    return False


def _name(model_fn: Callable) -> str:
    return getattr(model_fn, "__qualname__", None) or type(model_fn).__name__


def build(model_fn: Callable, in_dim: int, num_classes: int, seed: int, dtype: str = "float32") -> nn.Module:
    """Call ``model_fn`` under ``torch.manual_seed(seed)`` (the global RNG is left as it was) and return its
    module in ``dtype``; :class:`InputError` if the call fails or returns something that is not a Module.

    Args:
        model_fn: see the module docstring.
        in_dim, num_classes: the graph's input feature size and number of classes.
        seed: initialisation seed (every rank uses the same).
        dtype: ``float32`` or ``float64``.
    """
    wants_dims = _wants_dims(model_fn)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            module = model_fn(in_dim, num_classes) if wants_dims else model_fn()
    except InputError:
        raise
    except Exception as err:
        raise InputError(f"model_fn {_name(model_fn)} failed when called with "
                         f"{f'(in_dim={in_dim}, num_classes={num_classes})' if wants_dims else 'no arguments'}: "
                         f"{err.__class__.__name__}: {err}") from err
    if not isinstance(module, nn.Module):
        raise InputError(f"model_fn {_name(model_fn)} returned {type(module).__name__}, not a torch.nn.Module")
    return module.to(DTYPES[dtype])


def config_of(module: nn.Module, seed: int):
    """The ``cfg`` the training loop reads: the module's own when it has a model config (a subclass of the
    built-in GNN), else a :class:`CustomModelConfig`; :class:`InputError` for an unrelated ``cfg`` attribute."""
    own = getattr(module, "cfg", None)
    if own is None:
        return CustomModelConfig(model=f"custom:{type(module).__name__}", seed=seed)
    names = {f.name for f in fields(own)} if is_dataclass(own) else set()
    if {"model", "seed"} <= names:
        return own
    raise InputError(f"{type(module).__name__} has an attribute `cfg`, which the training loop reads as the model's "
                     "configuration; rename it")


def _takes_epoch(module: nn.Module) -> bool:
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _graph_and_x(module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: pass ``(graph, x)`` to a forward that takes no epoch."""
    return args[:2]


def install(trainer: Trainer, model_fn: Callable, seed: int) -> None:
    """Replace the trainer's built-in model by the one ``model_fn`` builds (same seed on every rank), with a
    fresh Adam over its parameters (the trainer's learning rate and weight decay)."""
    cfg = trainer.train_cfg
    in_dim = trainer.in_dim  # features widened by every switched-on strategy (label augmentation: + classes)
    module = build(model_fn, in_dim, trainer.part.num_classes, seed, cfg.dtype)
    module.cfg = config_of(module, seed)
    module.sarlab_factory = factory_path(model_fn)  # what a saved model is rebuilt from (save_model)
    if pyg.is_pyg_model(module):  # forward(x, edge_index[, edge_type]): propagate runs over the shards
        pyg.attach(module)
    elif not _takes_epoch(module):
        module.register_forward_pre_hook(_graph_and_x)
    trainer.model = module
    trainer.params = list(module.parameters())
    trainer.opt = torch.optim.Adam(trainer.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    # the module's own randomness (a PyG model's F.dropout) draws from the global RNG: seeded from (seed, rank),
    # so a run repeats exactly however its workers started (forked from a zygote or fresh) and whatever ran before
    torch.manual_seed(rank_seed(seed, trainer.graph.rank))


def rank_seed(seed: int, rank: int) -> int:
    """The global RNG's seed on ``rank`` for a custom model built with ``seed``: distinct per rank (dropout masks
    of different nodes must not repeat across ranks), the same in every run."""
    return seed * 100_003 + rank
