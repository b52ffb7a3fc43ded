"""Fitting the round sampler's costs (:class:`sarlab.simulator.strategies.sampling_model.SamplerCosts`) to real ``--mode
sampling`` epochs of calibration graphs.

Three steps, each on records of calibration runs (``sarlab train --mode sampling --json``), never on the runs a
validation then prices:

1. ``round_s``, ``batch_s``, ``edge_s``, ``row_s``: non-negative least squares of one-worker runs' sampler time
   per epoch (medians over a run's epochs), the records' ``sample_s`` less the gather of the batches' input rows
   (priced by the profile), on the epoch's ``rounds``, ``steps`` (batches), sampled edges (the batches'
   ``sampled_edges`` plus the rounds' union edges, which the records do not count: predicted) and input rows (the
   batches' ``input_rows`` plus the rounds' ``round_input_rows``). Runs with different ``--round-batches`` and batch
   sizes tell the per-round costs from the per-batch ones;
2. ``step_s``: the median of what one-worker epochs take per step beyond the prediction with ``step_s = 0``;
3. ``sync_s``: the median of what two-worker epochs take beyond the prediction with ``sync_s = 0``, per blocking
   exchange or all-reduce of the epoch.

``python -m sarlab.simulator.strategies.sampling_fit --one R.json:PARTS ... --two R.json:PARTS ... --out FILE`` writes
the JSON that :func:`sarlab.simulator.strategies.sampling_model.load_sampler_costs` reads; ``--validate R.json:PARTS ...
--costs FILE --out CSV`` compares predictions with other runs of ``sarlab train`` (:func:`validate`; the head-to-head
campaign's
records: :mod:`sarlab.simulator.studies.strategy_validation`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.hardware.provenance import resolve_profile
from sarlab.simulator.strategies.sampling_model import (
    COSTS_FORMAT,
    SamplerCosts,
    SamplingEpoch,
    SamplingSpec,
    load_sampler_costs,
    simulate_sampling_epoch,
)
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.sampled_sizes import degrees_from_partition, train_nodes_per_part
from sarlab.simulator.workload.workload import load_manifest

#: sampler costs that price nothing (the priced parts of an epoch alone)
NO_SAMPLER = SamplerCosts(round_s=0.0, batch_s=0.0, edge_s=0.0, row_s=0.0, step_s=0.0, sync_s=0.0)
#: the fit's columns, in the order of :func:`sampler_design`
DESIGN_COLUMNS = ("rounds", "batches", "sampled_edges", "input_rows")


def sampler_design(record: dict, round_edges: float) -> list[float]:
    """One epoch's row of the fit: (rounds, batches, sampled edges of its batches and rounds, input rows of its
    batches and rounds); ``round_edges``: the rounds' sampled edges (predicted)."""
    return [float(record["rounds"]), float(record["steps"]), float(record["sampled_edges"]) + round_edges,
            float(record["input_rows"]) + float(record["round_input_rows"])]


def fit_sampler_costs(design: np.ndarray, sampler_s: np.ndarray, compute_scale: float = 1.0) -> SamplerCosts:
    """Step 1: ``(round_s, batch_s, edge_s, row_s)`` by non-negative least squares of ``sampler_s`` (seconds per
    epoch) on ``design`` (:func:`sampler_design` rows); ``step_s`` and ``sync_s`` 0."""
    A, y = np.asarray(design, dtype=np.float64), np.asarray(sampler_s, dtype=np.float64)
    scale = np.maximum(A.max(axis=0), 1e-30)
    x = nonnegative_lstsq(A / scale, y) / scale
    return SamplerCosts(round_s=float(x[0]), batch_s=float(x[1]), edge_s=float(x[2]), row_s=float(x[3]), step_s=0.0,
                        sync_s=0.0, compute_scale=compute_scale, source=f"fitted to {len(y)} one-worker runs")


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
    sampling = SamplingSpec(fanouts, int(record["batch_size"]), bool(record["sampling_prefetch"]),
                            int(record.get("round_batches") or 0))
    return model, sampling, RunSpec(threads=float(record["threads"]))


class Run:
    """One calibration or validation run: its records after the warm-up and its partition, with what the
    prediction needs from them.

    Args:
        records: the run's records (all ranks).
        partition_dir: the partition it trained on.
    """

    def __init__(self, records: list[dict], partition_dir: str):
        self.records, self.partition_dir = records, partition_dir
        self.stats = load_manifest(partition_dir)
        self.degrees = degrees_from_partition(partition_dir)
        self.train = train_nodes_per_part(self.stats, partition_dir)
        self.model, self.sampling, self.run = run_config(records[0])
        self.epochs = sorted({int(r["epoch"]) for r in records})

    def predict(self, profile: Profile, costs: SamplerCosts) -> SamplingEpoch:
        return simulate_sampling_epoch(self.stats, self.model, self.sampling, profile, self.degrees, self.train,
                                       self.run, costs)

    def epoch_times(self) -> list[float]:
        """The measured epoch time of every epoch (the slowest rank)."""
        return [max(float(r["epoch_time_s"]) for r in self.records if int(r["epoch"]) == e) for e in self.epochs]

    def rank0(self) -> list[dict]:
        return [r for r in self.records if int(r["rank"]) == 0]


def read_run(spec: str, warmup: int) -> Run:
    """``RECORDS.json:PARTITION_DIR`` -> the run, its records after the warm-up epochs."""
    path, _, parts = spec.rpartition(":")
    if not path or not parts:
        raise ValueError(f"{spec}: expected RECORDS.json:PARTITION_DIR")
    records = [r for r in json.loads(Path(path).read_text()) if int(r["epoch"]) >= warmup]
    if not records:
        raise ValueError(f"{spec}: no epochs after the {warmup} warm-up epoch(s)")
    missing = [c for c in ("rounds", "sample_s", "round_input_rows") if c not in records[0]]
    if missing:
        raise ValueError(f"{spec}: the records lack {', '.join(missing)}: record them with today's "
                         "`sarlab train --mode sampling --json`")
    return Run(records, parts)


def calibrate_sampler(one: list[Run], two: list[Run], profile: Profile) -> SamplerCosts:
    """Steps 1-3 of the module docstring; ``one``/``two``: one- and two-worker calibration runs."""
    design, sampler_s = [], []
    for run in one:  # one row per run: its epochs' medians (a loaded machine's slow epochs weigh less)
        priced = run.predict(profile, NO_SAMPLER)  # the gathers alone (one worker: no messages)
        rows = [sampler_design(r, float(priced.round_edges[0])) for r in run.rank0()]
        design.append(np.median(np.asarray(rows), axis=0))
        sampler_s.append(statistics.median(float(r["sample_s"]) for r in run.rank0()) - float(priced.sample_s[0]))
    costs = fit_sampler_costs(np.asarray(design), np.asarray(sampler_s), profile.compute_scale)
    excess = []
    for run in one:
        predicted = run.predict(profile, costs)
        excess += [(m - predicted.epoch_time_s) / predicted.steps for m in run.epoch_times()]
    costs = replace(costs, step_s=max(0.0, statistics.median(excess)))
    per_sync = []
    for run in two:
        base = run.predict(profile, costs)
        calls = (run.predict(profile, replace(costs, sync_s=1e-3)).epoch_time_s - base.epoch_time_s) / 1e-3
        per_sync += [(m - base.epoch_time_s) / max(calls, 1.0) for m in run.epoch_times()]
    sync = max(0.0, statistics.median(per_sync)) if per_sync else 0.0
    return replace(costs, sync_s=sync, source=f"fitted to {len(sampler_s)} one-worker runs and "
                   f"{sum(len(run.epoch_times()) for run in two)} two-worker epochs "
                   f"(sarlab.simulator.strategies.sampling_fit)")


def validate(runs: list[Run], profile: Profile, costs: SamplerCosts) -> pd.DataFrame:
    """Predicted vs measured per run: the epoch time (median over the epochs of the slowest rank), the sampler's and
    the fetch's seconds (slowest rank's median) and, per epoch, the rounds' and the batches' input rows, the
    batches' remote input rows and sampled edges (rank 0's median)."""
    out = []
    for run in runs:
        pred = run.predict(profile, costs)
        rank0 = run.rank0()

        def med(key: str, records: list[dict] = rank0) -> float:
            return statistics.median(float(r[key]) for r in records)

        slowest = [max((r for r in run.records if int(r["epoch"]) == e), key=lambda r: float(r["epoch_time_s"]))
                   for e in run.epochs]
        measured = statistics.median(run.epoch_times())
        steps, size = pred.steps, pred.sizes[0]
        out.append({"graph": run.stats.graph, "model": run.model.model, "workers": run.stats.num_parts,
                    "fanouts": rank0[0]["fanouts"], "batch_size": run.sampling.batch_size,
                    "round_batches": run.sampling.round_batches, "steps": steps, "rounds": pred.rounds,
                    "threads": run.run.threads, "epochs": len(rank0), "measured_epoch_s": measured,
                    "predicted_epoch_s": pred.epoch_time_s, "time_error": pred.epoch_time_s / measured - 1.0,
                    "measured_sample_s": med("sample_s", slowest), "predicted_sample_s": float(pred.sample_s.max()),
                    "measured_fetch_wait_s": med("fetch_wait_s", slowest),
                    "predicted_fetch_wait_s": float(pred.fetch_wait_s.max()),
                    "measured_round_rows": med("round_input_rows"), "predicted_round_rows": float(pred.round_rows[0]),
                    "measured_input_rows": med("input_rows"), "predicted_input_rows": steps * float(size.rows[0]),
                    "measured_remote_rows": med("remote_input_rows"),
                    "predicted_remote_rows": steps * size.remote_inputs,
                    "measured_edges": med("sampled_edges"), "predicted_edges": steps * float(size.edges.sum())})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sarlab.simulator.strategies.sampling_fit", description=__doc__.splitlines()[0])
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
    payload = {"format": COSTS_FORMAT, **asdict(costs), "profile": profile.name,
               "runs": {"one": a.one, "two": a.two}}
    Path(a.out).write_text(json.dumps(payload, indent=1) + "\n")
    print(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
