"""The head-to-head campaign's epochs (``python -m sarlab.real.bench.head_to_head``) predicted: exact ``sar`` /
``oneshot``, ``sampling`` and stale halos, each on the network it ran on, with one machine profile and one link profile.

Measured per run (strategy, network, seed): the median over epochs ``>= warmup`` of the slowest rank's epoch time
(``sarlab.real.bench.head_to_head.run_table``'s ``epoch_time_s``). Predicted once per (strategy, network): ``sar`` and
``oneshot`` by :func:`sarlab.simulator.system.epoch.simulate_epoch`, ``sampling`` by
:func:`sarlab.simulator.strategies.sampling_model.simulate_sampling_epoch` (its sampler costs fitted elsewhere,
:mod:`sarlab.simulator.strategies.sampling_fit`), ``stale-S`` by
:func:`sarlab.simulator.strategies.staleness_model.simulate_stale_epoch`; a ``veth:rate=R`` network takes the link
profile of its rate as the inter-host link (:func:`sarlab.simulator.network.linkprofile.for_network`), for every
strategy alike. The error of a run is ``predicted / measured - 1``; a (strategy, network) reports the median ``|error|``
over its seeds.

The campaign's records carry the metric columns and the strategy, network, staleness, steps and fan-outs, not the
model or the partition: those are this module's options (defaults: ``sarlab.real.bench.head_to_head``' own).

``python -m sarlab.simulator.studies.strategy_validation --records OUT.records.csv --partition DIR --link LINK.json
--out PREFIX`` writes ``PREFIX.csv`` (one row per run) and ``PREFIX.md`` (the summary per strategy and network).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd

from sarlab.common.records import measured_epochs
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.hardware.provenance import resolve_profile
from sarlab.simulator.network.linkprofile import LinkProfile, for_network, read_link_profile
from sarlab.simulator.strategies.sampling_model import (
    SamplerCosts,
    SamplingSpec,
    load_sampler_costs,
    simulate_sampling_epoch,
)
from sarlab.simulator.strategies.staleness_model import simulate_stale_epoch
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import MODES, RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.sampled_sizes import degrees_from_partition, train_nodes_per_part
from sarlab.simulator.workload.workload import PartitionStats, load_manifest


def measured_runs(records: pd.DataFrame, warmup: int = 1) -> pd.DataFrame:
    """One row per (strategy, net, seed): the median over epochs ``>= warmup`` of the slowest rank's epoch time,
    and, where the records have them, the slowest rank's median ``sample_s`` and ``fetch_wait_s``."""
    rows = []
    for (name, net, seed), df in records.groupby(["strategy", "net", "seed"], sort=False):
        late = measured_epochs(df, warmup)
        slowest = late.loc[late.groupby("epoch").epoch_time_s.idxmax()]
        row = {"strategy": name, "net": net, "seed": seed, "epochs": int(slowest.epoch.nunique()),
               "measured_epoch_s": float(slowest.epoch_time_s.median()),
               "staleness": int(df.staleness.iloc[0]) if "staleness" in df.columns else 0,
               "fanouts": str(df.fanouts.iloc[0]) if "fanouts" in df.columns else "",
               "load_1min": float(df.load_1min_before.iloc[0]) if "load_1min_before" in df.columns else np.nan}
        for key in ("sample_s", "fetch_wait_s"):
            if key in slowest.columns and slowest[key].notna().any():
                row[f"measured_{key}"] = float(slowest[key].median())
        rows.append(row)
    return pd.DataFrame(rows)


def strategy_kind(name: str, staleness: int) -> tuple[str, int]:
    """(``sar`` | ``oneshot`` | ``sampling`` | ``stale``, S) of a campaign's strategy name."""
    if name == "sampling":
        return "sampling", 0
    match = re.fullmatch(r"stale-(\d+)", name)
    if match or staleness > 0:
        return "stale", int(match.group(1)) if match else staleness
    if name in MODES:
        return name, 0
    raise ValueError(f"strategy {name!r}: expected sar, sa, oneshot, sampling or stale-S")


class Predictor:
    """Predicts one epoch of a campaign's strategy on a network, on one partition.

    Args:
        partition_dir: the campaign's partition.
        model: the model every strategy trained.
        profile: the machine profile; links: link profiles of the emulated networks.
        sampling: the sampling settings (fan-outs replaced by a record's when it names them).
        threads: threads per worker.
        sampler: the sampler's costs.
    """

    def __init__(self, partition_dir: str, model: ModelSpec, profile: Profile, links: list[LinkProfile],
                 sampling: SamplingSpec, threads: float, sampler: SamplerCosts):
        self.stats: PartitionStats = load_manifest(partition_dir)
        self.degrees = degrees_from_partition(partition_dir)
        self.train = train_nodes_per_part(self.stats, partition_dir)
        self.model, self.profile, self.links = model, profile, links
        self.sampling, self.threads, self.sampler = sampling, threads, sampler

    def epoch(self, name: str, net: str, staleness: int = 0, fanouts: str = "") -> dict:
        """The predicted epoch (and, for ``sampling``, its sampler and fetch seconds) of ``name`` on ``net``."""
        N = self.stats.num_parts
        profile, per_nic = for_network(self.profile, self.links, net, N)
        kind, S = strategy_kind(name, staleness)
        run = RunSpec(mode=kind if kind in MODES else "oneshot", prefetch=1, threads=self.threads,
                      workers_per_nic=per_nic)
        if kind in MODES:
            return {"predicted_epoch_s": float(simulate_epoch(self.stats, self.model, run, profile).epoch_time_s.max())}
        if kind == "stale":
            return {"predicted_epoch_s": simulate_stale_epoch(self.stats, self.model, S, profile, run).epoch_time_s}
        spec = self.sampling
        if fanouts and fanouts.lower() != "nan":
            values = tuple(-1 if f == "all" else int(f) for f in fanouts.split(","))
            spec = SamplingSpec(values * (self.model.layers if len(values) == 1 else 1), spec.batch_size,
                                spec.prefetch, spec.round_batches)
        s = simulate_sampling_epoch(self.stats, self.model, spec, profile, self.degrees, self.train, run, self.sampler)
        return {"predicted_epoch_s": s.epoch_time_s, "predicted_sample_s": float(s.sample_s.max()),
                "predicted_fetch_wait_s": float(s.fetch_wait_s.max()), "predicted_steps": s.steps,
                "predicted_rounds": s.rounds}


def validate_campaign(records: pd.DataFrame, predictor: Predictor, warmup: int = 1) -> pd.DataFrame:
    """One row per run: measured and predicted epoch and the error (module docstring)."""
    runs = measured_runs(records, warmup)
    cache: dict[tuple, dict] = {}
    out = []
    for row in runs.to_dict("records"):
        key = (row["strategy"], row["net"], row["staleness"], row["fanouts"])
        if key not in cache:
            cache[key] = predictor.epoch(*key)
        row.update(cache[key])
        row["time_error"] = row["predicted_epoch_s"] / row["measured_epoch_s"] - 1.0
        out.append(row)
    return pd.DataFrame(out)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, net): seeds, median measured and predicted epoch, median ``|error|`` over the seeds."""
    grouped = table.groupby(["strategy", "net"], sort=False)
    out = grouped.agg(seeds=("seed", "size"), measured_epoch_s=("measured_epoch_s", "median"),
                      predicted_epoch_s=("predicted_epoch_s", "first"),
                      median_abs_error=("time_error", lambda e: float(e.abs().median())),
                      median_error=("time_error", "median")).reset_index()
    return out


def markdown(summ: pd.DataFrame, header: str) -> str:
    """The :func:`summary` as Markdown, under ``header``."""
    lines = [header, "", "| strategy | net | seeds | measured s (median) | predicted s | median error | "
             "median abs. error |", "|---|---|---|---|---|---|---|"]
    for r in summ.itertuples():
        lines.append(f"| {r.strategy} | {r.net} | {r.seeds} | {r.measured_epoch_s:.3f} | {r.predicted_epoch_s:.3f} | "
                     f"{r.median_error:+.1%} | {r.median_abs_error:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sarlab.simulator.studies.strategy_validation", description=__doc__.splitlines()[0])
    p.add_argument("--records", required=True, help="the campaign's OUT.records.csv")
    p.add_argument("--partition", required=True, help="the partition directory the campaign trained on")
    p.add_argument("--link", nargs="*", default=[], help="link profiles (JSON) of the emulated networks")
    p.add_argument("--profile", default=None, help="machine profile (default: as `sarlab simulate`)")
    p.add_argument("--costs", default=None, help="sampler costs JSON (default: the shipped one)")
    p.add_argument("--model", default="sage", help="gcn, sage or gat (default %(default)s)")
    p.add_argument("--layers", type=int, default=2, help="default %(default)s")
    p.add_argument("--hidden", type=int, default=64, help="default %(default)s")
    p.add_argument("--heads", type=int, default=4, help="GAT heads (default %(default)s)")
    p.add_argument("--aggr", default="mean", help="SAGE aggregator (default %(default)s)")
    p.add_argument("--threads", type=float, default=1.0, help="threads per worker (default %(default)s)")
    p.add_argument("--fanouts", default="15,10", help="sampling fan-outs where the records name none (default "
                   "%(default)s)")
    p.add_argument("--batch-size", type=int, default=1024, help="sampling batch per worker (default %(default)s)")
    p.add_argument("--round-batches", type=int, default=0, help="sampling batches per round (0: the epoch; "
                   "default %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="epochs before this one are warm-up (default %(default)s)")
    p.add_argument("--strategies", default="", help="comma list to keep (default: every strategy in the records)")
    p.add_argument("--out", required=True, help="output prefix: PREFIX.csv and PREFIX.md")
    a = p.parse_args(argv)
    profile, where = resolve_profile(a.profile)
    links = [read_link_profile(path, profile) for path in a.link]
    model = ModelSpec(model=a.model, layers=a.layers, hidden=a.hidden, heads=a.heads if a.model == "gat" else 1,
                      aggr=a.aggr, fused=a.model == "gat", batchnorm=False, dropout=0.0)
    fanouts = tuple(-1 if f == "all" else int(f) for f in a.fanouts.split(","))
    sampling = SamplingSpec(fanouts, a.batch_size, True, a.round_batches)
    predictor = Predictor(a.partition, model, profile, links, sampling, a.threads, load_sampler_costs(a.costs))
    records = pd.read_csv(a.records)
    if a.strategies:
        records = records[records.strategy.isin(a.strategies.split(","))]
    table = validate_campaign(records, predictor, a.warmup)
    summ = summary(table)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(a.out + ".csv", index=False)
    header = (f"Profile {profile.name} ({where}); links: {', '.join(lp.source for lp in links) or 'none'}; "
              f"sampler costs: {predictor.sampler.source}; records {a.records}, partition {a.partition}.")
    text = markdown(summ, header)
    Path(a.out + ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
