"""In each worker, record the counting allocator's live and peak bytes around the engine's aggregation calls.

Put this folder first on ``PYTHONPATH`` and set ``H19_TRACE=1`` (``H19_NOCACHE=1``: the allocator without its block
cache, so that live bytes are tensor bytes plus the block rounding); each worker writes ``/tmp/h19_trace_<pid>.json``
when layer 0 starts a forward (feature width ``H19_FIRST_DIM``, default 64) and at exit. ``levels.py`` prints it.
"""
import functools
import importlib.abc
import importlib.util
import json
import os
import sys

if os.environ.get("H19_TRACE"):
    LOG = []
    STATE = {"ext": None, "depth": 0}

    def ext():
        if STATE["ext"] is None:
            from sarlab.kernels import _loader
            STATE["ext"] = _loader.extension()
        return STATE["ext"]

    def dump():
        with open(f"/tmp/h19_trace_{os.getpid()}.json", "w") as fh:
            json.dump(LOG, fh)

    def shape_of(args, kwargs):
        out = []
        for a in list(args) + list(kwargs.values()):
            if hasattr(a, "shape"):
                out.append(list(a.shape))
            elif hasattr(a, "num_edges"):
                out.append(f"shard(E={a.num_edges})")
        return out

    def wrap(owner, name, label):
        fn = owner.__dict__[name]
        static = isinstance(fn, staticmethod)
        raw = fn.__func__ if static else fn

        @functools.wraps(raw)
        def inner(*args, **kwargs):
            e = ext()
            st = e.alloc_stats() if e is not None else {"live": 0, "peak": 0}
            STATE["depth"] += 1
            rec = {"name": label, "depth": STATE["depth"], "live0": st["live"], "peak0": st["peak"],
                   "shapes": shape_of(args, kwargs)}
            LOG.append(rec)
            try:
                return raw(*args, **kwargs)
            finally:
                STATE["depth"] -= 1
                st = e.alloc_stats() if e is not None else {"live": 0, "peak": 0}
                rec.update(live1=st["live"], peak1=st["peak"])
        setattr(owner, name, staticmethod(inner) if static else inner)

    def patch(modname, module):
        if modname == "sarlab.nn.gat":
            A = module.AttentionAggregation
            for n in ("init", "accumulate", "finalize", "shard_vjp", "self_vjp"):
                wrap(A, n, "att." + n)
            orig = module.GATConv.forward

            def fwd(self, graph, x):
                if x.shape[1] == int(os.environ.get("H19_FIRST_DIM", "64")):
                    dump()
                return orig(self, graph, x)
            module.GATConv.forward = fwd
            wrap(module.GATConv, "forward", "GATConv.forward")
        if modname == "sarlab.core.aggregate":
            wrap(module.GradReturn, "post", "grad.post")
            wrap(module.GradReturn, "_complete", "grad.complete")
            wrap(module.RingFetch, "_post", "fetch.post")
            wrap(module.SequentialAggregate, "backward", "seq.backward")
            wrap(module.SequentialAggregate, "forward", "seq.forward")
            wrap(module.ShardAggregate, "backward", "shard.backward")
            wrap(module.ShardAggregate, "forward", "shard.forward")
        if modname == "sarlab.core.memory" and os.environ.get("H19_NOCACHE"):
            orig_use = module.use_method

            def use_method(name="live", cache=True):
                return orig_use(name, cache=False)
            module.use_method = use_method
        if modname == "sarlab.training.trainer":
            wrap(module.Trainer, "step", "trainer.step")

    class Finder(importlib.abc.MetaPathFinder):
        names = ("sarlab.nn.gat", "sarlab.core.aggregate", "sarlab.training.trainer", "sarlab.core.memory")

        def find_spec(self, fullname, path, target=None):
            if fullname not in self.names:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            loader = spec.loader
            orig_exec = loader.exec_module

            def exec_module(module):
                orig_exec(module)
                patch(fullname, module)
            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())
    import atexit
    atexit.register(dump)
