"""The simulator's Python API: :func:`simulate` (what ``sarlab simulate`` sweeps) and :func:`plan` (what
``sarlab plan`` picks), callable from a script or a notebook without a cluster.

Both predict with the SimPy model of one epoch (:func:`sarlab.simulator.system.epoch.simulate_epoch`) on a
machine profile resolved as the CLI resolves ``--profile`` (:func:`sarlab.simulator.hardware.provenance.
resolve_profile`: ``None`` is this machine's calibration when it exists, else the shipped ``epyc-2core``). The
commands ``sarlab simulate`` and ``sarlab plan`` (:mod:`sarlab.real.commands.simulate_cmd`,
:mod:`sarlab.real.commands.plan_cmd`) build the same calls from their flags; the model defaults are
``sarlab train``'s (:data:`MODEL_DEFAULTS`). Nothing here imports the executor.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sarlab.simulator.hardware.backends import backend_of
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.hardware.provenance import profile_line, resolve_profile
from sarlab.simulator.network.linkprofile import LinkProfile, read_link_profile
from sarlab.simulator.strategies.cost_model import (
    load_resources,
    resources_json,
)
from sarlab.simulator.strategies.planner import Workloads, candidates, picks
from sarlab.simulator.strategies.predictor import STRATEGIES, sweep_strategies
from sarlab.simulator.strategies.sampling_model import SamplingSpec, parse_fanouts
from sarlab.simulator.studies.validate import validate  # noqa: F401 (``sarlab simulate --validate``'s door)
from sarlab.simulator.system.sweep import simulate_sweep, summarize_sweep
from sarlab.simulator.workload.model import ModelSpec, parse_model

#: ``sarlab train``'s model defaults (``sarlab.real.commands.options.MODEL_DEFAULTS`` and ``add_model_args``),
#: mirrored here because the simulator does not import the executor; ``tests/test_simulator_cli.py`` keeps the
#: two equal, and ``sarlab simulate`` takes its flag defaults from here
MODEL_DEFAULTS = {"model": "sage", "layers": 2, "hidden": 64, "aggr": "mean", "heads": 4, "dropout": 0.0,
                  "batchnorm": False, "seed": 0, "dtype": "float32"}
#: the strategies that :func:`simulate` prices with the epoch schedule
EPOCH_MODES = ("sar", "sa", "oneshot")
NOTE = "accuracy is not modelled: sampling and stale learn differently from exact training"


def _names(values: str | int | Iterable) -> list:
    """``"a,b"`` / ``"a"`` / ``3`` / an iterable -> a list of its items."""
    if isinstance(values, str):
        return [s.strip() for s in values.split(",") if s.strip()]
    if isinstance(values, int | ModelSpec):
        return [values]
    return list(values)


def _profile(profile: Profile | str | None) -> tuple[Profile, str]:
    """A profile object as it is, anything else through :func:`resolve_profile`."""
    if isinstance(profile, Profile):
        return profile, f"Profile {profile.name}"
    return resolve_profile(profile)


def simulate(
    graph: str,
    workers: int | Iterable[int] = (2, 4, 8),
    model: str | ModelSpec | Iterable[str | ModelSpec] = MODEL_DEFAULTS["model"],
    modes: str | Iterable[str] = EPOCH_MODES,
    profile: Profile | str | None = None,
    net: str = "loopback",
    *,
    layers: int = MODEL_DEFAULTS["layers"],
    hidden: int = MODEL_DEFAULTS["hidden"],
    heads: int = MODEL_DEFAULTS["heads"],
    aggr: str = MODEL_DEFAULTS["aggr"],
    dropout: float = MODEL_DEFAULTS["dropout"],
    batchnorm: bool = MODEL_DEFAULTS["batchnorm"],
    dtype: str = MODEL_DEFAULTS["dtype"],
    fused: bool = True,
    relations: int = 1,
    prefetch: int = 1,
    threads: float | None = None,
    workers_per_host: int | None = None,
    edge_cut: float | None = None,
    links: Iterable[str | Path | LinkProfile] = (),
    network: str = "reserve",
    backend: str = "gloo",
    summary: bool = False,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Predict one epoch of every (worker count, model, mode) combination; the Python form of ``sarlab simulate``.

    Returns one metric record per rank and configuration (the columns of
    :data:`sarlab.common.records.RECORD_COLUMNS`: ``epoch_time_s``, ``compute_s``, ``comm_wait_s``, ``bytes_sent``,
    ``bytes_recv``, ``peak_mem_bytes`` = baseline + predicted peak, the configuration; ``loss`` and accuracies NaN),
    so predictions concatenate with measured records. With ``summary=True``, one row per configuration instead
    (:func:`sarlab.simulator.system.sweep.summarize_sweep`: slowest rank's epoch time, mean compute, wait and
    bytes sent, largest peak above the baseline). ``records.attrs`` holds ``profile`` and ``profile_source``.

    Example::

        import sarlab
        df = sarlab.simulate("ogbn-products", workers=(4, 8), model="gcn", modes="sar,oneshot",
                             profile="icelake-hdr200", hidden=128)
        df.groupby(["mode", "workers"]).epoch_time_s.max()
        sarlab.simulate("estimate:nodes=20000,edges=300000,features=32,classes=8", 2, summary=True)

    Args:
        graph: graph preset (``ogbn-products``, ``ogbn-papers100M``...), ``estimate:nodes=N,edges=E,features=F,
            classes=C[,cut=PHI]`` or partition directory (``{N}`` is replaced by the worker count).
        workers: worker count(s).
        model: label(s) ``gcn``, ``sage[-mean|-max|-pool]``, ``gat[-fused|-unfused]``, ``rgcn[-per-edge]`` (a comma
            string or a list; each label overrides its own part of the model the keywords describe), or
            :class:`~sarlab.simulator.workload.model.ModelSpec` objects, used as they are.
        modes: subset of ``sar``, ``sa``, ``oneshot`` (``sampling``/``stale`` are priced by :func:`plan`).
        profile: machine profile: a :class:`Profile`, a preset, a shipped profile's name or a JSON path; None =
            this machine's calibration when it exists, else ``epyc-2core`` (as ``sarlab simulate``).
        net: ``loopback`` (the profile's links) or ``veth:rate=R[,hosts=H]`` (emulated hosts, priced by ``links``).
        layers, hidden, heads, aggr, dropout, batchnorm, dtype, relations: the model, as ``sarlab train``'s flags.
        fused: GAT's fused attention kernels / R-GCN aggregating first (``--unfused`` is ``fused=False``).
        prefetch, threads, workers_per_host, network: ring rounds fetched ahead, threads per worker (None: cores /
            workers), placement (None: the profile's; 0: one host), NIC channel implementation.
        edge_cut: edge-cut fraction of presets and estimates (None: a random partition, (N-1)/N).
        links: link profiles (``sarlab netbench --out`` JSON paths or :class:`LinkProfile`) for ``net="veth:..."``.
        backend: torch.distributed backend of the runs (``gloo``, or one the profile has an overlay of, ``ccl``:
            ``sarlab calibrate --backend ccl``); its links and message costs price the exchanges.
        summary: return the per-configuration summary instead of the per-rank records.
        progress: called with one line per configuration (e.g. ``print``); None: quiet.
    """
    base = ModelSpec(model="gcn", layers=layers, hidden=hidden, heads=heads, aggr=aggr, fused=fused,
                     batchnorm=batchnorm, dropout=dropout, dtype=dtype, relations=relations)
    found = sweep(graph, workers, [m if isinstance(m, ModelSpec) else parse_model(m, base) for m in _names(model)],
                  modes, profile, net, prefetch=prefetch, threads=threads, workers_per_host=workers_per_host,
                  edge_cut=edge_cut, links=links, network=network, backend=backend, progress=progress)
    out = summarize_sweep(found.records) if summary else found.records
    out.attrs.update(profile=found.profile.name, profile_source=found.source)
    return out


@dataclass
class Sweep:
    """What :func:`sweep` predicted: the per-rank records, the simulated configurations (their statistics,
    model, run and result: what a Gantt chart re-simulates), and the profile that priced them."""

    records: pd.DataFrame
    items: list
    profile: Profile
    source: str


def sweep(graph: str, workers: int | Iterable[int], models: Iterable[ModelSpec], modes: str | Iterable[str],
          profile: Profile | str | None = None, net: str = "loopback", *, prefetch: int = 1,
          threads: float | None = None, workers_per_host: int | None = None, edge_cut: float | None = None,
          links: Iterable[str | Path | LinkProfile] = (), network: str = "reserve", backend: str = "gloo",
          progress: Callable[[str], None] | None = None) -> Sweep:
    """:func:`simulate` over models already built, keeping the configurations: ``sarlab simulate``'s sweep (its
    plots re-simulate the configurations with traces)."""
    prof, source = _profile(profile)
    mode_list = _names(modes)
    others = [m for m in mode_list if m in STRATEGIES and m not in EPOCH_MODES]
    if others:
        raise ValueError(f"simulate prices {', '.join(EPOCH_MODES)}; {', '.join(others)} are priced by "
                         "sarlab.plan(..., strategies=...) or `sarlab simulate --modes`")
    link_list = [lp if isinstance(lp, LinkProfile) else read_link_profile(lp, prof) for lp in links]
    records, items = simulate_sweep(graph, mode_list, list(models), [int(w) for w in _names(workers)],
                                    prof, prefetch=prefetch, threads=threads,
                                    workers_per_host=workers_per_host, edge_cut=edge_cut, network=network,
                                    progress=progress, net=net, links=link_list, backend=backend)
    return Sweep(records, items, prof, source)


def price_strategies(graph: str, strategies: Iterable[str], models: Iterable[ModelSpec],
                     workers: int | Iterable[int], profile: Profile | str | None = None, *,
                     fanouts: str | None = None, batch_size: int = 1024, staleness: int = 1,
                     edge_cut: float | None = None, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """``sampling`` / ``stale`` priced without the epoch schedule, one row per (model, worker count): what
    ``sarlab simulate --modes sampling,stale`` prints
    (:func:`sarlab.simulator.strategies.predictor.sweep_strategies`)."""
    prof, _ = _profile(profile)
    return sweep_strategies(graph, list(strategies), list(models), [int(w) for w in _names(workers)], prof,
                            fanouts=fanouts, batch_size=batch_size, staleness=staleness, edge_cut=edge_cut,
                            progress=progress)


def plan(
    graph,
    *,
    epochs: int,
    model: str = MODEL_DEFAULTS["model"],
    layers: int = MODEL_DEFAULTS["layers"],
    hidden: int = MODEL_DEFAULTS["hidden"],
    heads: int = MODEL_DEFAULTS["heads"],
    strategies: str | Iterable[str] = ("sar", "oneshot", "sampling", "stale"),
    resources: str | Iterable[str] | None = None,
    prices: str | Path | None = None,
    max_workers: int = 16,
    memory_per_worker: float | None = None,
    fanouts: str | None = None,
    batch_size: int = 1024,
    staleness: int = 1,
    profile: Profile | str | None = None,
    edge_cut: float | None = None,
    progress: Callable[[str], None] | None = None,
    backend: str = "gloo",
) -> dict:
    """Every (strategy x workers x resource) candidate and the three picks; the Python form of ``sarlab plan``.

    Each candidate is one predicted epoch (:func:`sarlab.simulator.strategies.predictor.predict`) on the profile
    turned into that resource (:func:`~sarlab.simulator.strategies.cost_model.resource_profile`), so
    ``time_s = epochs * epoch_s``, ``cost_usd`` = :func:`~sarlab.simulator.strategies.cost_model.run_cost` and
    ``value = 1 / (time_s * cost_usd)``. Workers are powers of two up to ``max_workers`` (a partition directory
    without ``{N}`` fixes them). Candidates whose worker needs more memory than the resource has (or than
    ``memory_per_worker``) are listed with ``fits=False`` and not picked. Accuracy is not modelled.

    Returns the dict ``sarlab plan --json`` writes: ``candidates`` (dicts with ``strategy``, ``resource``,
    ``workers``, ``epoch_s``, ``time_s``, ``cost_usd``, ``value``, ``mem_gib``, ``fits``, ``detail``), ``picks``
    (``lowest_time``, ``lowest_cost``, ``best_value``; empty when nothing fits), the resources and the settings.

    Example::

        import sarlab
        result = sarlab.plan("synthetic:nodes=3000,degree=8,features=16,classes=4,seed=0", epochs=20,
                             max_workers=2, fanouts="5,5", batch_size=256)
        best = result["picks"]["best_value"]   # e.g. {"strategy": "sar", "workers": 2, "resource": "cpu", ...}

    Args:
        graph: engine graph spec (``synthetic:``, ``npz:``, ``ogb:``; partitioned with METIS per worker count into a
            temporary directory) or :class:`~sarlab.data.graphs.Graph`, or a simulator workload (preset,
            ``estimate:...[,train=T]``, partition directory with ``{N}``).
        epochs: epochs to train (>= 1).
        model, layers, hidden, heads: ``gcn``, ``sage[-mean|-max]``, ``gat[-fused|-unfused]`` and its sizes.
        strategies: subset of ``sar``, ``oneshot``, ``sampling``, ``stale``.
        resources: resource names (None: all in the prices).
        prices: JSON file of resource fields overriding the defaults (e.g. ``{"cpu": {"price_per_hour": 0.61}}``).
        max_workers: largest worker count tried.
        memory_per_worker: memory cap per worker in GiB (None: each resource's own).
        fanouts, batch_size: sampling's fan-outs (hop 1 first, or ``all``; None: 15,10,5 cut or padded with 5 to
            ``layers``) and seeds per worker and step.
        staleness: stale's S >= 1.
        profile: machine profile the resources are derived from (as :func:`simulate`).
        edge_cut: edge cut of estimate workloads.
        progress: called with progress lines (e.g. ``print``); None: quiet.
        backend: torch.distributed backend of the runs (as :func:`simulate`): the profile's overlay of it prices the
            message software and the links' latency and per-message gap (each resource sets the bandwidth).
    """
    base, source = _profile(profile)
    base = base.for_backend(backend)
    if progress is not None:
        progress(profile_line(base, source))
    table = load_resources(prices)
    names = list(table) if resources is None else _names(resources)
    unknown = [n for n in names if n not in table]
    chosen = _names(strategies)
    if unknown:
        raise ValueError(f"unknown resource(s) {unknown}: the prices know {sorted(table)}")
    if not chosen or set(chosen) - set(STRATEGIES):
        raise ValueError(f"--strategies: choose among {', '.join(STRATEGIES)}")
    if epochs < 1 or max_workers < 1 or staleness < 1:
        raise ValueError("--epochs, --max-workers and --staleness must be >= 1")
    spec = parse_model(model, ModelSpec(layers=layers, hidden=hidden, heads=heads, fused=True, batchnorm=False,
                                        dropout=0.0))
    hops = parse_fanouts(fanouts or ",".join(str(f) for f in ([15, 10, 5] + [5] * layers)[:layers]), layers)
    sampling = SamplingSpec(hops, batch_size)
    loads = Workloads(graph, edge_cut, progress)
    try:
        rows = candidates(loads, max_workers, {n: table[n] for n in names}, chosen, base, spec, epochs,
                          sampling=sampling, staleness=staleness, memory_per_worker=memory_per_worker,
                          progress=progress)
    finally:
        loads.close()
    return {"graph": loads.spec, "model": spec.label(), "layers": spec.layers, "hidden": spec.hidden,
            "epochs": epochs, "profile": base.name, "profile_source": source, "backend": backend_of(base),
            "fanouts": list(hops),
            "batch_size": batch_size, "staleness": staleness, "memory_per_worker_gib": memory_per_worker,
            "resources": resources_json({n: table[n] for n in names}), "candidates": rows, "picks": picks(rows),
            "note": NOTE}
