"""``sarlab simulate`` (wired by real/commands/cli.py): flags, printing and plots over :mod:`sarlab.simulator.api`.

``simulate`` takes ``train``'s model flags with ``train``'s defaults (:data:`MODEL_DEFAULTS`), so the same
flags describe the same model; ``--model`` (and ``--workers``) may list several values to sweep over. Its
Python form is :func:`sarlab.simulator.api.simulate` (``sarlab.simulate``), which takes the same defaults.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from sarlab.common.paths import cache_dir
from sarlab.real.commands.show import say, warn, write_json_file
from sarlab.real.launch import outputs
from sarlab.simulator import api
from sarlab.simulator.api import MODEL_DEFAULTS  # ``sarlab train``'s model defaults, mirrored by the simulator
from sarlab.simulator.calibration.measured import machine_mismatch, read_records
from sarlab.simulator.hardware.allocators import ratio_note
from sarlab.simulator.hardware.backends import BASE_BACKEND
from sarlab.simulator.hardware.host import regime
from sarlab.simulator.hardware.profile import PRESETS, Profile
from sarlab.simulator.hardware.provenance import (
    DEFAULT_PROFILE,
    LOCAL_PROFILE,
    machine_warnings,
    plausibility_warnings,
    profile_line,
    resolve_profile,
    shipped_profiles,
)
from sarlab.simulator.network.linkprofile import read_link_profile
from sarlab.simulator.studies.plots import gantt, memory_plot, scaling_plot, validation_plot
from sarlab.simulator.studies.validate import backend_ratios, error_summary, markdown_table
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import resolve_placement
from sarlab.simulator.system.sweep import summarize_sweep
from sarlab.simulator.workload.model import ModelSpec, parse_model


def split_list(text: str) -> list[str]:
    """``"a,b, c"`` -> ``["a", "b", "c"]``."""
    return [s.strip() for s in text.split(",") if s.strip()]


# ------------------------------------------------------------------------------------- simulate
def simulate_parser() -> argparse.ArgumentParser:
    d = MODEL_DEFAULTS
    p = argparse.ArgumentParser(
        prog="sarlab simulate",
        description="Predict epoch time and per-worker peak memory of sar/sa/oneshot training with a SimPy model "
        "of the epoch; sweep modes x models x worker counts; or validate against real records. The model flags "
        "and their defaults are `sarlab train`'s.",
    )
    p.add_argument("--graph", default="ogbn-products",
                   help="partition directory ({N} = worker count), preset (ogbn-products, ogbn-papers100M) or "
                   "estimate:nodes=N,edges=E,features=F,classes=C[,cut=PHI] (default: %(default)s)")
    p.add_argument("--edge-cut", type=float, default=None,
                   help="edge-cut fraction for presets/estimates (default: random partition, (N-1)/N)")
    p.add_argument("--modes", default="sar,sa,oneshot",
                   help="comma list of sar, sa, oneshot, sampling, stale (default: %(default)s)")
    p.add_argument("--model", "--models", dest="models", default=d["model"],
                   help="comma list: gcn, sage[-mean|-max|-pool], gat[-fused|-unfused], rgcn[-per-edge] (default: "
                   "%(default)s)")
    p.add_argument("--workers", default="2,4,8", help="comma list of worker counts (default: %(default)s)")
    p.add_argument("--layers", type=int, default=d["layers"], help="graph convolutions (default %(default)s)")
    p.add_argument("--hidden", type=int, default=d["hidden"], help="hidden size (default %(default)s)")
    p.add_argument("--heads", type=int, default=d["heads"], help="GAT heads of hidden layers (default %(default)s)")
    p.add_argument("--aggr", default=d["aggr"], choices=("mean", "max", "pool"),
                   help="SAGE aggregator for 'sage' (default %(default)s)")
    p.add_argument("--dropout", type=float, default=d["dropout"], help="dropout (default %(default)s)")
    p.add_argument("--batchnorm", action="store_true", default=d["batchnorm"],
                   help="distributed BatchNorm after hidden layers")
    p.add_argument("--seed", type=int, default=d["seed"],
                   help="accepted for `sarlab train`'s flags; the prediction does not depend on it")
    p.add_argument("--dtype", default=d["dtype"], choices=("float32", "float64", "bfloat16"))
    p.add_argument("--unfused", action="store_true", help="GAT ('gat'): not the fused attention kernels; R-GCN "
                   "('rgcn'): one message per edge instead of aggregating first")
    p.add_argument("--relations", type=int, default=1, help="R-GCN ('rgcn'): relations of the graph, one weight each "
                   "(a typed partition's manifest must agree; other graphs' edges are split evenly over them; default "
                   "%(default)s)")
    p.add_argument("--prefetch", type=int, default=1, help="ring rounds fetched ahead (default %(default)s)")
    p.add_argument("--fanouts", default=None, help="sampling: fan-outs, hop 1 first, or 'all' (default 15,10,5 cut "
                   "or padded with 5 to --layers)")
    p.add_argument("--batch-size", type=int, default=1024, help="sampling: seeds per worker and step (default "
                   "%(default)s)")
    p.add_argument("--staleness", type=int, default=1, help="stale: S >= 1 (default %(default)s)")
    p.add_argument("--threads", type=float, default=None, help="threads per worker (default: cores / workers)")
    p.add_argument("--workers-per-host", type=int, default=None,
                   help="placement (default: the profile's; 0 = all workers on one host)")
    p.add_argument("--profile", default=None,
                   help=f"profile JSON, shipped profile ({', '.join(shipped_profiles())}) or preset "
                   f"({', '.join(PRESETS)}); default: this machine's calibration ({LOCAL_PROFILE}) if it exists, "
                   "else epyc-2core")
    p.add_argument("--net", default="loopback",
                   help="network of the runs: loopback (the profile's links) or veth:rate=R[,hosts=H] (emulated hosts "
                   "on this machine's cores, N/H workers sharing each host's link, priced by --link)")
    p.add_argument("--link", metavar="LINK_JSON", nargs="+", default=[],
                   help="link profiles (`sarlab netbench --out`) for --net veth:... and for validating records "
                   "measured on an emulated network (matched by rate)")
    p.add_argument("--backend", default=None,
                   help="torch.distributed backend of the runs: gloo (default; the profile's own links and message "
                   "costs) or ccl (the profile's backends.ccl overlay, `sarlab calibrate --backend ccl`); --validate "
                   "prices each record with the backend of its own `backend` column instead")
    p.add_argument("--network", default="reserve", choices=("reserve", "simpy"),
                   help="NIC channel implementation (default: %(default)s)")
    _output_arguments(p)
    return p


def _output_arguments(p: argparse.ArgumentParser) -> None:
    """``sarlab simulate``'s outputs (records, plots, JSON, --force) and its validation against real records."""
    p.add_argument("--out", metavar="CSV", help="write the per-rank records (metric-record columns) here")
    p.add_argument("--plots", metavar="DIR", help="write Gantt and memory PNGs (and a scaling plot) into DIR "
                   "(simulator_gantt_*.png, simulator_memory_*.png, simulator_scaling.png)")
    p.add_argument("--plot-limit", type=int, default=3, help="Gantt/memory plots for at most this many configs")
    p.add_argument("--validate", metavar="RECORDS", nargs="+",
                   help="compare with real records (CSV / JSON lines from `sarlab bench engine`; several files "
                   "are joined)")
    p.add_argument("--validation-out", default=str(cache_dir("simulator_validation.csv")),
                   help="validation table (default: %(default)s, in sarlab's cache, replaced by every --validate); "
                   "its PNG and the backend ratios' CSV are written beside it")
    p.add_argument("--warmup", type=int, default=1, help="validation: epochs before this one are warm-up")
    p.add_argument("--drift", choices=("none", "probe", "auto"), default="none",
                   help="validation: which prediction is the primary one: 'none' the profile's own compute_scale, "
                   "'probe' the compute_scale the speed probes next to each run measured (records of `sarlab bench "
                   "engine --probe`), 'auto' probe where the records have probes (default: %(default)s); both are "
                   "in the table when probes exist. The probe's scale is one flat figure from a large one-worker "
                   "graph: where small shards run relatively slower, as on the 2026-11-26 Xeon VM, it priced worse "
                   "than the profile's size curve (results/backends.md)")
    p.add_argument("--json", metavar="PATH", help="write machine-readable output here")
    p.add_argument("--force", action="store_true",
                   help="replace output files that already exist and this command did not write (files in sarlab's "
                   "cache, such as the default --validation-out, are replaced without it)")


def check_outputs(args: argparse.Namespace) -> None:
    """Every output path of the flags, before any work (:mod:`sarlab.real.launch.outputs`): one
    :class:`~sarlab.real.launch.outputs.OutputError` naming the option and the path."""
    force = args.force
    if args.validate:
        out = Path(args.validation_out)
        outputs.check_file(out, "--validation-out", force, suffixes=(".csv",))
        for sibling in (out.with_suffix(".png"), out.with_name(f"{out.stem}_backend_ratios.csv")):
            outputs.check_file(sibling, f"--validation-out {args.validation_out!r}: its companion", force)
    else:
        if args.out:
            outputs.check_file(args.out, "--out", force)
        if args.plots:
            outputs.check_dir(args.plots, "--plots", force, writes=PLOT_FILES)
    if args.json:
        outputs.check_file(args.json, "--json", force)


#: the files ``--plots DIR`` writes
PLOT_FILES = ("simulator_gantt_*.png", "simulator_memory_*.png", "simulator_scaling.png")


def _drawn(draw, path: Path, data, title: str) -> Path:
    """``draw(data, path, title)`` into ``path`` atomically (:func:`sarlab.real.launch.outputs.staged_file`)."""
    with outputs.staged_file(path) as tmp:
        draw(data, tmp, title)
    return path


def base_model(args: argparse.Namespace) -> ModelSpec:
    """The model the flags describe; each ``--model`` label overrides its own part (:func:`parse_model`)."""
    return ModelSpec(model="gcn", layers=args.layers, hidden=args.hidden, heads=args.heads, aggr=args.aggr,
                     fused=not args.unfused, batchnorm=args.batchnorm, dropout=args.dropout,
                     dtype=args.dtype, relations=args.relations)  # fmt: skip


def simulate_main(argv: list[str] | None = None) -> int:
    """``sarlab simulate``: sweep or validate. Returns the exit status."""
    args = simulate_parser().parse_args(argv)
    check_outputs(args)  # before anything is priced
    try:
        profile, source = resolve_profile(args.profile)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    say(profile_line(profile, source))
    for line in plausibility_warnings(profile):
        warn(line)
    try:
        links = [read_link_profile(path, profile) for path in args.link]
    except (FileNotFoundError, ValueError, KeyError) as err:
        print(f"error: link profile: {err}", file=sys.stderr)
        return 2
    for lp in links:
        say(f"link {lp.link.bandwidth_Bps * 8 / 1e6:,.1f} Mbit/s payload, latency {lp.link.latency_s * 1e6:.0f} us "
               f"+ gap {lp.link.gap_s * 1e6:.0f} us, shared efficiency {lp.shared_efficiency:.2f}, {lp.backend}, from "
               f"{lp.source}")
        for line in lp.assumed:
            warn(f"link profile {lp.source}: {line}")
    if args.validate:  # the records' machine is the one to compare with (machine_mismatch)
        if args.backend is not None:
            print("error: --backend does not apply to --validate: each record is priced with the backend of its own "
                  "`backend` column (gloo where it has none)", file=sys.stderr)
            return 2
        return _validate(args, profile, links)
    return _predict(args, profile, source, links)


def _predict(args: argparse.Namespace, profile: Profile, source: str, links: list) -> int:
    """The sweep (or the strategies' table) the flags ask for, printed, plotted and written."""
    cautions = machine_warnings(profile)
    for line in cautions:
        warn(line)
    if args.profile is None and Path(source) == DEFAULT_PROFILE and not cautions:
        say(f"this machine has no calibration of its own ({LOCAL_PROFILE} is absent): the prediction uses the shipped "
            "profile of another host of its kind; `sarlab calibrate` (about 3 min) fits this machine's")
    backend = args.backend or BASE_BACKEND
    try:
        if backend != BASE_BACKEND and backend in profile.backends:
            meta = profile.backends[backend].get("meta", {})
            say(f"backend {backend}: the profile's {backend} links and message costs (measured on "
                   f"{meta.get('date', 'an unknown date')}: {meta.get('command') or 'command not recorded'})")
        profile = profile.for_backend(backend)
        models = [parse_model(label, base_model(args)) for label in split_list(args.models)]
        workers = [int(w) for w in split_list(args.workers)]
        others = [m for m in split_list(args.modes) if m in ("sampling", "stale")]
        if others:  # strategies priced without the epoch schedule (simulator/strategies/predictor.py)
            table = api.price_strategies(args.graph, others, models, workers, profile, fanouts=args.fanouts,
                                         batch_size=args.batch_size, staleness=args.staleness,
                                         edge_cut=args.edge_cut, progress=say)
            say(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
            args.modes = ",".join(m for m in split_list(args.modes) if m not in others)
            if not args.modes:
                if args.json:
                    write_json_file(args.json, {"profile": profile.name, "strategies": table.to_dict(orient="records")})
                return 0
        start = time.perf_counter()
        found = api.sweep(args.graph, workers, models, args.modes, profile, args.net, prefetch=args.prefetch,
                          threads=args.threads, workers_per_host=args.workers_per_host, edge_cut=args.edge_cut,
                          links=links, network=args.network, backend=backend, progress=say)
        df, items = found.records, found.items
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = summarize_sweep(df)
    events = sum(it.result.events for it in items)
    wall = time.perf_counter() - start
    say(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for line in topology_lines(profile, items):
        say(line)
    say(f"{len(items)} configurations, {events:,} events in {wall:.2f}s ({events / max(wall, 1e-9):,.0f} events/s)")
    if args.out:
        outputs.write_csv(args.out, df)
        say(f"wrote {args.out}")
    if args.plots:
        outdir = Path(args.plots)
        for it in items[: max(args.plot_limit, 0)]:  # re-simulated with traces (same result, more bookkeeping)
            traced = simulate_epoch(it.stats, it.model, replace(it.run, trace=True), profile)
            title = f"{it.model.label()} {it.mode}, {it.workers} workers ({it.stats.graph}, {profile.name})"
            say(f"wrote {_drawn(gantt, outdir / f'simulator_gantt_{it.key()}.png', traced, title)}")
            say(f"wrote {_drawn(memory_plot, outdir / f'simulator_memory_{it.key()}.png', traced, title)}")
        if len(workers) > 1:
            scaling = _drawn(scaling_plot, outdir / "simulator_scaling.png", summary,
                             f"{args.graph} ({profile.name})")
            say(f"wrote {scaling}")
    if args.json:
        write_json_file(
            args.json,
            {
                "profile": profile.name,
                "profile_source": source,
                "profile_machine": profile.meta.get("machine"),
                "backend": backend,
                "graph": args.graph,
                "events": events,
                "wall_s": wall,
                "summary": summary.to_dict(orient="records"),
                "records": df.to_dict(orient="records"),
            },
        )
    return 0


def _validate(args: argparse.Namespace, profile: Profile, links: list) -> int:
    try:
        records = pd.concat([read_records(path) for path in args.validate], ignore_index=True)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    say(f"{len(records)} records from {', '.join(args.validate)}")
    other = machine_mismatch(records, profile)
    if other:
        print(
            f"warning: the records were measured on {', '.join(other)}, the profile was calibrated on "
            f"{profile.meta.get('machine')}: times predicted with another CPU's profile do not validate the "
            "simulator; run `sarlab calibrate` on the machine of the records and pass its profile with --profile",
            file=sys.stderr,
        )
    note = ratio_note(profile, [str(m) for m in records.get("mem_method", pd.Series(dtype=str)).dropna().unique()])
    if note:
        warn(note)
    try:
        table = api.validate(records, profile, warmup=args.warmup, progress=say, drift=args.drift, links=links)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    errors = error_summary(table)
    out = Path(args.validation_out)
    outputs.write_csv(out, table)
    png = _drawn(validation_plot, out.with_suffix(".png"), table, f"simulator vs measured ({profile.name})")
    ratios = backend_ratios(table)
    if len(ratios):
        outputs.write_csv(out.with_name(f"{out.stem}_backend_ratios.csv"), ratios)
    say(markdown_table(table))
    say(
        f"median |error|: time {errors['median_abs_time_error']:.1%}, "
        f"memory {errors['median_abs_memory_error']:.1%} over {errors['configurations']} configurations"
        + (
            f"; time with each run's probe-measured compute_scale: {errors['median_abs_time_error_probe']:.1%}, "
            f"with the profile's own ({profile.compute_scale:.3g}): {errors['median_abs_time_error_static']:.1%}"
            if "median_abs_time_error_probe" in errors
            else ""
        )
    )
    for name in sorted(k[len("configurations_"):] for k in errors if k.startswith("configurations_")):
        say(f"  {name}: time {errors[f'median_abs_time_error_{name}']:.1%}, memory "
               f"{errors[f'median_abs_memory_error_{name}']:.1%} over {errors[f'configurations_{name}']} "
               "configurations")
    for name in sorted(k[len("paired_configurations_"):] for k in errors if k.startswith("paired_configurations_")):
        say(f"  {name} / gloo epoch-time ratio of the same configuration: median |error| "
               f"{errors[f'median_abs_ratio_error_{name}']:.1%} over {errors[f'paired_configurations_{name}']} pairs "
               "(the overlay's own error: the base model's cancels)")
    say(f"wrote {out}\nwrote {png}" + (f"\nwrote {out.with_name(f'{out.stem}_backend_ratios.csv')}" if len(ratios)
                                            else ""))
    if args.json:
        write_json_file(
            args.json,
            {
                "profile": profile.name,
                "profile_machine": profile.meta.get("machine"),
                "records_machines_not_profile": other,
                **errors,
                "table": table.to_dict(orient="records"),
            },
        )
    return 0


def topology_lines(profile: Profile, items: list) -> list[str]:
    """What the table above is: predicted, not measured, and the hosts it assumed for each worker count."""
    lines = [f"every number above is PREDICTED by the SimPy model (not measured) on profile {profile.name!r}, hosts of "
             f"{profile.cores_per_host} cores:"]
    seen = set()
    for it in items:
        if it.workers in seen:
            continue
        seen.add(it.workers)
        place = resolve_placement(profile, it.workers, it.run)
        hosts = -(-it.workers // place.workers_per_host)
        lines.append(f"  N = {it.workers}: {hosts} host(s) x {place.workers_per_host} worker(s), {place.threads:g} "
                     f"thread(s) each ({regime(place.workers_per_host, place.threads, profile.cores_per_host)})")
    return lines

