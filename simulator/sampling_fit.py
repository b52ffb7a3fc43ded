"""Fitting the sampler's costs (:class:`simulator.sampling_model.SamplerCosts`) to real ``--mode sampling`` epochs.

Three steps, each on records of a calibration graph (not the graphs a validation then prices):

1. ``hop_s``, ``edge_s``, ``row_s``: non-negative least squares of the one-worker epochs' ``sample_s / steps`` on
   (hops, sampled edges, added rows) per step, the sizes the records count;
2. ``step_s``: the median of what one-worker epochs take per step beyond the prediction with ``step_s = 0``;
3. ``sync_s``: the median of what two-worker epochs take per step beyond the prediction with ``sync_s = 0``,
   over the step's blocking calls.

``python -m simulator.sampling_fit --one R.json:PARTS ... --two R.json:PARTS ... --out FILE`` writes the JSON
that :func:`simulator.sampling_model.load_sampler_costs` reads (records: ``sarlab train --mode sampling --json``);
``--validate R.json:PARTS ... --costs FILE --out CSV`` compares predictions with other runs (:func:`validate`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.model import ModelSpec
from simulator.profile import Profile
from simulator.provenance import resolve_profile
from simulator.runspec import RunSpec
from simulator.sampling_model import (
    SamplerCosts,
    SamplingSpec,
    degrees_from_partition,
    load_sampler_costs,
    simulate_sampling_epoch,
    train_nodes_per_part,
)
from simulator.workload import load_manifest


def fit_sampler_costs(records: list[dict], layers: int, compute_scale: float = 1.0) -> SamplerCosts:
    """Step 1: ``hop_s``, ``edge_s`` and ``row_s`` from one-worker records (``sample_s``, ``steps``,
    ``sampled_edges``, ``input_rows``, ``seeds`` per epoch); ``peer_s`` keeps its counted value."""
    a, y = [], []
    for r in records:
        steps = float(r["steps"])
        new_rows = (float(r["input_rows"]) - float(r["seeds"])) / steps
        a.append([layers, float(r["sampled_edges"]) / steps, new_rows])
        y.append(float(r["sample_s"]) / steps)
    A, Y = np.asarray(a), np.asarray(y)
    scale = A.max(axis=0)
    x = nonnegative_lstsq(A / scale, Y) / scale
    return SamplerCosts(hop_s=float(x[0]), edge_s=float(x[1]), row_s=float(x[2]), compute_scale=compute_scale,
                        source=f"fitted to {len(records)} one-worker sampling epochs")


def nonnegative_lstsq(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares over few columns: the best least-squares fit among all column subsets whose
    solution is non-negative."""
    best, best_err = np.zeros(A.shape[1]), float(np.sum(y**2))
    for mask in range(1, 1 << A.shape[1]):
        cols = [j for j in range(A.shape[1]) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
        if np.all(sol >= 0):
            x = np.zeros(A.shape[1])
            x[cols] = sol
            err = float(np.sum((A @ x - y) ** 2))
            if err < best_err:
                best, best_err = x, err
    return best


def run_config(record: dict) -> tuple[ModelSpec, SamplingSpec, RunSpec]:
    """The model, sampling settings and threads a record of ``sarlab train --mode sampling`` ran with."""
    model = ModelSpec(model=record["model"], layers=int(record["layers"]), hidden=int(record["hidden"]),
                      heads=int(record["heads"]), aggr=record["aggr"], fused=bool(record["fused"]),
                      batchnorm=bool(record["batchnorm"]), dropout=float(record["dropout"]), dtype=record["dtype"])
    fanouts = tuple(-1 if f == "all" else int(f) for f in str(record["fanouts"]).split(","))
    if len(fanouts) == 1:
        fanouts = fanouts * model.layers
    sampling = SamplingSpec(fanouts, int(record["batch_size"]), bool(record["sampling_prefetch"]))
    return model, sampling, RunSpec(threads=float(record["threads"]))


def predict_records(records: list[dict], partition_dir: str, profile: Profile,
                    costs: SamplerCosts) -> list[tuple[float, int, float]]:
    """(measured epoch seconds, steps, predicted epoch seconds) per epoch (the slowest rank) of one run."""
    stats = load_manifest(partition_dir)
    degrees, train = degrees_from_partition(partition_dir), train_nodes_per_part(stats, partition_dir)
    model, sampling, run = run_config(records[0])
    pred = simulate_sampling_epoch(stats, model, sampling, profile, degrees, train, run, costs)
    epochs = sorted({int(r["epoch"]) for r in records})
    return [(max(float(r["epoch_time_s"]) for r in records if int(r["epoch"]) == e), pred.steps,
             pred.epoch_time_s) for e in epochs]


def read_run(spec: str, warmup: int) -> tuple[list[dict], str]:
    """``RECORDS.json:PARTITION_DIR`` -> (records after the warm-up epochs, partition directory)."""
    path, _, parts = spec.rpartition(":")
    records = [r for r in json.loads(Path(path).read_text()) if int(r["epoch"]) >= warmup]
    if not records or not parts:
        raise ValueError(f"{spec}: expected RECORDS.json:PARTITION_DIR with epochs after the warm-up")
    return records, parts


def calibrate_sampler(one: list[tuple[list[dict], str]], two: list[tuple[list[dict], str]],
                      profile: Profile) -> SamplerCosts:
    """Steps 1-3 of the module docstring; ``one``/``two``: (records, partition directory) of 1- and 2-worker runs."""
    first = [r for records, _ in one for r in records]
    costs = fit_sampler_costs(first, int(first[0]["layers"]), profile.compute_scale)
    costs = replace(costs, step_s=0.0, sync_s=0.0)
    excess = [(m - p) / steps for records, parts in one for m, steps, p in predict_records(records, parts, profile,
                                                                                             costs)]
    costs = replace(costs, step_s=max(0.0, statistics.median(excess)))
    per_sync = []
    for records, parts in two:
        base = predict_records(records, parts, profile, costs)
        unit = predict_records(records, parts, profile, replace(costs, sync_s=1e-3))
        for (m, steps, p), (_, _, u) in zip(base, unit):
            calls = (u - p) / steps / 1e-3
            per_sync.append((m - p) / steps / max(calls, 1.0))
    sync = max(0.0, statistics.median(per_sync)) if per_sync else 0.0
    return replace(costs, sync_s=sync, source=f"fitted to {len(first)} one-worker and "
                   f"{sum(len(r) for r, _ in two)} two-worker records (simulator.sampling_fit)")


def validate(runs: list[tuple[list[dict], str]], profile: Profile, costs: SamplerCosts) -> pd.DataFrame:
    """Predicted vs measured per run: the epoch time (median over the epochs of the slowest rank) and, per step,
    the input rows, remote input rows and sampled edges (rank 0's median)."""
    out = []
    for records, parts in runs:
        stats = load_manifest(parts)
        degrees, train = degrees_from_partition(parts), train_nodes_per_part(stats, parts)
        model, sampling, run = run_config(records[0])
        pred = simulate_sampling_epoch(stats, model, sampling, profile, degrees, train, run, costs)
        measured = statistics.median(m for m, _, _ in predict_records(records, parts, profile, costs))
        rank0 = [r for r in records if int(r["rank"]) == 0]
        steps = float(rank0[0]["steps"])
        size = pred.sizes[0]
        per_step = {key: statistics.median(float(r[key]) for r in rank0) / steps
                    for key in ("input_rows", "remote_input_rows", "sampled_edges")}
        out.append({"graph": stats.graph, "model": model.model, "workers": stats.num_parts,
                    "fanouts": records[0]["fanouts"], "batch_size": sampling.batch_size, "steps": int(steps),
                    "threads": run.threads, "epochs": len(rank0), "measured_epoch_s": measured,
                    "predicted_epoch_s": pred.epoch_time_s, "time_error": pred.epoch_time_s / measured - 1.0,
                    "measured_input_rows": per_step["input_rows"], "predicted_input_rows": float(size.rows[0]),
                    "measured_remote_rows": per_step["remote_input_rows"],
                    "predicted_remote_rows": size.remote_inputs,
                    "measured_edges": per_step["sampled_edges"], "predicted_edges": float(size.edges.sum())})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulator.sampling_fit", description=__doc__.splitlines()[0])
    p.add_argument("--one", nargs="+", default=[], help="RECORDS.json:PARTITION_DIR of one-worker runs")
    p.add_argument("--two", nargs="*", default=[], help="RECORDS.json:PARTITION_DIR of two-worker runs")
    p.add_argument("--validate", nargs="+", default=[], help="RECORDS.json:PARTITION_DIR of runs to predict")
    p.add_argument("--costs", default=None, help="--validate: sampler costs JSON (default: the shipped one)")
    p.add_argument("--warmup", type=int, default=1, help="epochs before this one are warm-up (default %(default)s)")
    p.add_argument("--profile", default=None, help="machine profile (default: as `sarlab simulate`)")
    p.add_argument("--note", default="", help="appended to the source line (machine, load, date)")
    p.add_argument("--out", required=True, help="JSON to write (fit) or CSV (--validate)")
    a = p.parse_args(argv)
    profile, _ = resolve_profile(a.profile)
    if a.validate:
        table = validate([read_run(s, a.warmup) for s in a.validate], profile, load_sampler_costs(a.costs))
        table.to_csv(a.out, index=False)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"median |time error| {table.time_error.abs().median():.1%} over {len(table)} runs; wrote {a.out}")
        return 0
    if not a.one:
        p.error("give --one runs to fit (or --validate runs to predict)")
    costs = calibrate_sampler([read_run(s, a.warmup) for s in a.one], [read_run(s, a.warmup) for s in a.two],
                              profile)
    costs = replace(costs, source=(costs.source + ("; " + a.note if a.note else "")))
    payload = {"format": "sarlab-sampler-costs/1", **asdict(costs), "profile": profile.name,
               "runs": {"one": a.one, "two": a.two}}
    Path(a.out).write_text(json.dumps(payload, indent=1) + "\n")
    print(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
