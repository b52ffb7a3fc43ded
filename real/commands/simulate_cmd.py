"""Command-line entry points: ``sarlab calibrate`` and ``sarlab simulate`` (wired by real/commands/cli.py).

``simulate`` takes ``train``'s model flags with ``train``'s defaults (:data:`MODEL_DEFAULTS`), so the same
flags describe the same model; ``--model`` (and ``--workers``) may list several values to sweep over. Its
Python form is :func:`sarlab.simulator.api.simulate` (``sarlab.simulate``), which takes the same defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from sarlab.common.paths import cache_dir
from sarlab.real.calibration.calibrate import Calibration, calibrate, calibrate_backend
from sarlab.simulator.api import MODEL_DEFAULTS  # ``sarlab train``'s model defaults, mirrored by the simulator
from sarlab.simulator.calibration.measured import machine_mismatch, read_records
from sarlab.simulator.hardware.backends import BASE_BACKEND, overlay_to_json
from sarlab.simulator.hardware.profile import PRESETS, Profile, save_profile
from sarlab.simulator.hardware.provenance import (
    LOCAL_PROFILE,
    machine_warnings,
    plausibility_warnings,
    profile_line,
    resolve_profile,
    shipped_profiles,
)
from sarlab.simulator.network.linkprofile import read_link_profile
from sarlab.simulator.strategies.strategies import sweep_strategies
from sarlab.simulator.studies.plots import gantt, memory_plot, scaling_plot, validation_plot
from sarlab.simulator.studies.validate import backend_ratios, error_summary, markdown_table, validate
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.sweep import simulate_sweep, summarize_sweep
from sarlab.simulator.workload.model import ModelSpec, parse_model

#: exit status of ``sarlab calibrate`` when it refused an implausible calibration
REJECTED = 3


def _print(line: str) -> None:
    print(line, flush=True)


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr, flush=True)


def _write_json(path: str, payload: dict[str, Any]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(payload, indent=1, default=_json_default) + "\n")
    _print(f"wrote {target}")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return str(obj)


def split_list(text: str) -> list[str]:
    """``"a,b, c"`` -> ``["a", "b", "c"]``."""
    return [s.strip() for s in text.split(",") if s.strip()]


# ------------------------------------------------------------------------------------ calibrate
def calibrate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sarlab calibrate",
        description="Measure this machine (GEMM, sparse/max aggregation, GAT attention, elementwise bandwidth, "
        "gloo point-to-point between 2 local processes, allocator, real engine epochs) and write the profile "
        "JSON that `sarlab simulate` reads.",
    )
    p.add_argument("--out", default=str(LOCAL_PROFILE),
                   help="profile JSON to write (default: %(default)s, which `sarlab simulate` uses by default)")
    p.add_argument("--quick", action="store_true", help="small shapes, few repeats (< 20 s)")
    p.add_argument("--no-network", action="store_true", help="skip the gloo benchmark (assume 50 us, 1 GB/s)")
    p.add_argument("--no-fused", action="store_true", help="skip the fused GAT kernels")
    p.add_argument("--no-engine", action="store_true",
                   help="do not fit compute_scale from real engine epochs (microbenchmarks alone)")
    p.add_argument("--scale-key", choices=("peak", "activation"), default="peak",
                   help="key the compute scale curve by each worker's predicted peak memory (default) or by its "
                   "activation bytes (nodes x widest layer)")
    p.add_argument("--threads", type=int, default=None, help="threads for the all-cores measurement")
    p.add_argument("--quiet-tries", type=int, default=3,
                   help="repeat a timing step up to this many times while other processes disturb it "
                   "(default: %(default)s)")
    p.add_argument("--accept-implausible", action="store_true",
                   help="write the profile to --out even when its thread efficiencies are implausible for the "
                   "core count (it is flagged in its notes and meta either way)")
    p.add_argument("--name", default="local", help="profile name (default: %(default)s)")
    p.add_argument("--backend", default=BASE_BACKEND, choices=("gloo", "ccl"),
                   help="gloo (default): the whole calibration, its links and message costs over gloo; ccl: only the "
                   "links, message costs and progress spread, measured over oneCCL and added to the existing profile "
                   "at --out as its backends.ccl overlay (nothing else in it changes; `sarlab simulate --backend ccl` "
                   "prices with it)")
    p.add_argument("--json", metavar="PATH", help="also write a machine-readable summary here")
    return p


def add_backend_overlay(path: Path, backend: str, overlay: dict[str, Any]) -> Path:
    """Write ``overlay`` as ``backends[backend]`` of the profile JSON at ``path``, leaving every other key as it is
    (the file is edited as JSON, so that keys this version does not read survive too)."""
    data = json.loads(path.read_text())
    data.setdefault("backends", {})[backend] = overlay_to_json(overlay)
    Profile.from_json(json.loads(json.dumps(data)))  # it must still load
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _calibrate_backend(args: argparse.Namespace, cal: Calibration, argv: list[str] | None) -> int:
    """``sarlab calibrate --backend NAME``: the backend's links and message costs into the profile at ``--out``."""
    out = Path(args.out)
    if not out.exists():
        print(f"error: {out} does not exist: `sarlab calibrate --backend {args.backend}` adds the {args.backend} "
              f"overlay to a calibrated profile; run `sarlab calibrate --out {out}` first", file=sys.stderr)
        return 2
    try:
        Profile.from_json(json.loads(out.read_text()))
    except (ValueError, KeyError, TypeError) as err:
        print(f"error: {out} is not a profile this version reads ({err})", file=sys.stderr)
        return 2
    command = "sarlab calibrate " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        overlay = calibrate_backend(cal, args.backend, command=command.strip())
    except (RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    add_backend_overlay(out, args.backend, overlay)
    link = overlay["intra_host"]
    _print(f"{args.backend}: alpha {link.alpha_s * 1e6:.1f} us (gap {link.gap_s * 1e6:.1f} us), bandwidth "
           f"{link.bandwidth_Bps / 1e9:.2f} GB/s; exchange call {overlay['p2p_call_s'] * 1e6:.1f} us + "
           f"{overlay['p2p_op_s'] * 1e6:.1f} us per op posted, {overlay['p2p_wait_s'] * 1e6:.1f} us per op waited, "
           f"{overlay['p2p_msg_cpu_s'] * 1e6:.1f} us background CPU per op")
    crowded = overlay.get("crowded_cpu", {})
    if crowded:
        _print(f"{args.backend} on hosts with more ranks than cores: "
               f"{crowded.get('p2p_msg_cpu_s', overlay['p2p_msg_cpu_s']) * 1e6:.1f} us background CPU per op, "
               f"{crowded.get('p2p_cpu_s_per_byte', overlay['p2p_cpu_s_per_byte']) * 1e9:.3f} s/GB moved "
               f"(else {overlay['p2p_cpu_s_per_byte'] * 1e9:.3f})")
    _print(f"wrote backends.{args.backend} into {out}")
    if args.json:
        _write_json(args.json, {"profile_path": str(out), "backend": args.backend, "overlay": overlay_to_json(overlay)})
    return 0


def calibrate_main(argv: list[str] | None = None) -> int:
    """``sarlab calibrate``: microbenchmarks -> profile JSON. Returns the exit status (:data:`REJECTED` when
    the calibration is implausible and not accepted; it is then written beside ``--out`` as
    ``<stem>.rejected.json``)."""
    args = calibrate_parser().parse_args(argv)
    cal = Calibration(
        quick=args.quick,
        network=not args.no_network,
        fused=not args.no_fused,
        engine=not args.no_engine,
        scale_key=args.scale_key,
        threads=args.threads,
        quiet_tries=1 if args.quick else args.quiet_tries,
        log=_print,
    )
    if args.backend != BASE_BACKEND:
        return _calibrate_backend(args, cal, argv)
    profile = calibrate(cal, name=args.name)
    implausible = profile.meta.get("implausible", [])
    out = Path(args.out)
    if implausible and not args.accept_implausible:
        out = out.with_name(out.stem + ".rejected.json")
        for line in implausible:
            print(f"error: implausible calibration, {line}", file=sys.stderr)
        print(f"error: not written to {args.out}: the thread efficiencies cannot be what {profile.cores_per_host} "
              "cores deliver (other processes on the cores? SMT siblings?); calibrate again on a quiet machine, or "
              f"pass --accept-implausible; the measured profile is in {out}", file=sys.stderr)  # fmt: skip
    for line in profile.meta.get("compute_scale_flag", []):
        _warn(f"{line} (written all the same: the scale absorbs it, but applies it to every op family)")
    path = save_profile(profile, out)
    _print(f"wrote {path}")
    if args.json:
        _write_json(args.json, {"profile_path": str(path), "profile": profile.to_json(), "implausible": implausible})
    return REJECTED if implausible and not args.accept_implausible else 0


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
    p.add_argument("--out", metavar="CSV", help="write the per-rank records (metric-record columns) here")
    p.add_argument("--plots", metavar="DIR", help="write Gantt and memory PNGs (and a scaling plot) into DIR")
    p.add_argument("--plot-limit", type=int, default=3, help="Gantt/memory plots for at most this many configs")
    p.add_argument("--validate", metavar="RECORDS", nargs="+",
                   help="compare with real records (CSV / JSON lines from `sarlab bench engine`; several files "
                   "are joined)")
    p.add_argument("--validation-out", default=str(cache_dir("simulator_validation.csv")),
                   help="validation table (default: %(default)s); its PNG is written beside it")
    p.add_argument("--warmup", type=int, default=1, help="validation: epochs before this one are warm-up")
    p.add_argument("--drift", choices=("none", "probe", "auto"), default="none",
                   help="validation: which prediction is the primary one: 'none' the profile's own compute_scale, "
                   "'probe' the compute_scale the speed probes next to each run measured (records of `sarlab bench "
                   "engine --probe`), 'auto' probe where the records have probes (default: %(default)s); both are "
                   "in the table when probes exist. The probe's scale is one flat figure from a large one-worker "
                   "graph: where small shards run relatively slower, as on the 2026-11-26 Xeon VM, it priced worse "
                   "than the profile's size curve (results/backends.md)")
    p.add_argument("--json", metavar="PATH", help="write machine-readable output here")
    return p


def base_model(args: argparse.Namespace) -> ModelSpec:
    """The model the flags describe; each ``--model`` label overrides its own part (:func:`parse_model`)."""
    return ModelSpec(model="gcn", layers=args.layers, hidden=args.hidden, heads=args.heads, aggr=args.aggr,
                     fused=not args.unfused, batchnorm=args.batchnorm, dropout=args.dropout,
                     dtype=args.dtype, relations=args.relations)  # fmt: skip


def simulate_main(argv: list[str] | None = None) -> int:
    """``sarlab simulate``: sweep or validate. Returns the exit status."""
    args = simulate_parser().parse_args(argv)
    try:
        profile, source = resolve_profile(args.profile)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _print(profile_line(profile, source))
    for line in plausibility_warnings(profile):
        _warn(line)
    try:
        links = [read_link_profile(path, profile) for path in args.link]
    except (FileNotFoundError, ValueError, KeyError) as err:
        print(f"error: link profile: {err}", file=sys.stderr)
        return 2
    for lp in links:
        _print(f"link {lp.link.bandwidth_Bps * 8 / 1e6:,.1f} Mbit/s payload, latency {lp.link.latency_s * 1e6:.0f} us "
               f"+ gap {lp.link.gap_s * 1e6:.0f} us, shared efficiency {lp.shared_efficiency:.2f}, {lp.backend}, from "
               f"{lp.source}")
        for line in lp.assumed:
            _warn(f"link profile {lp.source}: {line}")
    if args.validate:  # the records' machine is the one to compare with (machine_mismatch)
        if args.backend is not None:
            print("error: --backend does not apply to --validate: each record is priced with the backend of its own "
                  "`backend` column (gloo where it has none)", file=sys.stderr)
            return 2
        return _validate(args, profile, links)
    for line in machine_warnings(profile):
        _warn(line)
    backend = args.backend or BASE_BACKEND
    try:
        if backend != BASE_BACKEND and backend in profile.backends:
            meta = profile.backends[backend].get("meta", {})
            _print(f"backend {backend}: the profile's {backend} links and message costs (measured on "
                   f"{meta.get('date', 'an unknown date')}: {meta.get('command') or 'command not recorded'})")
        profile = profile.for_backend(backend)
        models = [parse_model(label, base_model(args)) for label in split_list(args.models)]
        workers = [int(w) for w in split_list(args.workers)]
        others = [m for m in split_list(args.modes) if m in ("sampling", "stale")]
        if others:  # strategies priced without the epoch schedule (simulator/strategies/strategies.py)
            table = sweep_strategies(args.graph, others, models, workers, profile, fanouts=args.fanouts,
                                     batch_size=args.batch_size, staleness=args.staleness, edge_cut=args.edge_cut,
                                     progress=_print)
            _print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
            args.modes = ",".join(m for m in split_list(args.modes) if m not in others)
            if not args.modes:
                if args.json:
                    _write_json(args.json, {"profile": profile.name, "strategies": table.to_dict(orient="records")})
                return 0
        start = time.perf_counter()
        df, items = simulate_sweep(
            args.graph,
            split_list(args.modes),
            models,
            workers,
            profile,
            prefetch=args.prefetch,
            threads=args.threads,
            workers_per_host=args.workers_per_host,
            edge_cut=args.edge_cut,
            trace=False,
            network=args.network,
            progress=_print,
            net=args.net,
            links=links,
            backend=backend,
        )
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = summarize_sweep(df)
    events = sum(it.result.events for it in items)
    wall = time.perf_counter() - start
    _print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    _print(f"{len(items)} configurations, {events:,} events in {wall:.2f}s ({events / max(wall, 1e-9):,.0f} events/s)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out, index=False)
        _print(f"wrote {args.out}")
    if args.plots:
        outdir = Path(args.plots)
        for it in items[: max(args.plot_limit, 0)]:  # re-simulated with traces (same result, more bookkeeping)
            traced = simulate_epoch(it.stats, it.model, replace(it.run, trace=True), profile)
            title = f"{it.model.label()} {it.mode}, {it.workers} workers ({it.stats.graph}, {profile.name})"
            _print(f"wrote {gantt(traced, outdir / f'simulator_gantt_{it.key()}.png', title)}")
            _print(f"wrote {memory_plot(traced, outdir / f'simulator_memory_{it.key()}.png', title)}")
        if len(workers) > 1:
            scaling = scaling_plot(summary, outdir / "simulator_scaling.png", f"{args.graph} ({profile.name})")
            _print(f"wrote {scaling}")
    if args.json:
        _write_json(
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
    _print(f"{len(records)} records from {', '.join(args.validate)}")
    other = machine_mismatch(records, profile)
    if other:
        print(
            f"warning: the records were measured on {', '.join(other)}, the profile was calibrated on "
            f"{profile.meta.get('machine')}: times predicted with another CPU's profile do not validate the "
            "simulator; run `sarlab calibrate` on the machine of the records and pass its profile with --profile",
            file=sys.stderr,
        )
    try:
        table = validate(records, profile, warmup=args.warmup, progress=_print, drift=args.drift, links=links)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    errors = error_summary(table)
    out = Path(args.validation_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    png = validation_plot(table, out.with_suffix(".png"), f"simulator vs measured ({profile.name})")
    ratios = backend_ratios(table)
    if len(ratios):
        ratios.to_csv(out.with_name(f"{out.stem}_backend_ratios.csv"), index=False)
    _print(markdown_table(table))
    _print(
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
        _print(f"  {name}: time {errors[f'median_abs_time_error_{name}']:.1%}, memory "
               f"{errors[f'median_abs_memory_error_{name}']:.1%} over {errors[f'configurations_{name}']} "
               "configurations")
    for name in sorted(k[len("paired_configurations_"):] for k in errors if k.startswith("paired_configurations_")):
        _print(f"  {name} / gloo epoch-time ratio of the same configuration: median |error| "
               f"{errors[f'median_abs_ratio_error_{name}']:.1%} over {errors[f'paired_configurations_{name}']} pairs "
               "(the overlay's own error: the base model's cancels)")
    _print(f"wrote {out}\nwrote {png}" + (f"\nwrote {out.with_name(f'{out.stem}_backend_ratios.csv')}" if len(ratios)
                                            else ""))
    if args.json:
        _write_json(
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
