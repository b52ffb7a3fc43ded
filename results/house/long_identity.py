"""Identity check for issue 38 item 6 (long functions): dump the outputs of every function split, so that the tree
before and after the splits can be compared byte for byte (results/house/long_functions.md).
Usage: PYTHONPATH=SITE python long_identity.py OUTDIR (SITE: a folder whose sarlab/ is the tree to check)."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

import sarlab  # noqa: E402
import sarlab.simulator  # noqa: E402

(out / "where.txt").write_text(f"{sarlab.__file__}\n{sarlab.simulator.__file__}\n")


def plain(x):
    """Anything the tables hold, as JSON-able exact values (floats by repr through json)."""
    from sarlab.simulator.system.pricing import PairTable, PartMemory
    from sarlab.simulator.workload.layer_memory import LayerMemory

    if isinstance(x, PairTable):
        return plain(x.array)
    if isinstance(x, PartMemory):
        return plain(x.stacked)
    if isinstance(x, LayerMemory):
        return {k: plain(getattr(x, k)) for k in LayerMemory.__dataclass_fields__}
    if isinstance(x, np.ndarray):
        return {"dtype": str(x.dtype), "shape": list(x.shape), "data": x.astype(np.float64).ravel().tolist()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    return x


# ------------------------------------------------------------------ 1. icelake preset
from sarlab.simulator.hardware.profile import icelake_hdr200, reference_laptop  # noqa: E402
from sarlab.simulator.hardware.provenance import resolve_profile  # noqa: E402

(out / "icelake_hdr200.json").write_text(json.dumps(icelake_hdr200().to_json(), indent=1, sort_keys=True))
assert icelake_hdr200() == icelake_hdr200()

# ------------------------------------------------------------------ 2. pricing tables and epochs
from sarlab.simulator.system.epoch import simulate_epoch  # noqa: E402
from sarlab.simulator.system.pricing import EpochPricing  # noqa: E402
from sarlab.simulator.system.runspec import RunSpec, resolve_placement  # noqa: E402
from sarlab.simulator.workload.model import ModelSpec, parse_model  # noqa: E402
from sarlab.simulator.workload.workload import estimate_partition  # noqa: E402

profiles = {"icelake-hdr200": icelake_hdr200(), "epyc-2core": resolve_profile("epyc-2core")[0],
            "reference-laptop": reference_laptop()}
labels = ["gcn", "sage-mean", "sage-max", "sage-pool", "gat-fused", "gat-unfused", "rgcn", "rgcn-per-edge"]
tables, epochs = {}, {}
for label, bn, mode, N, pname, wph in itertools.product(labels, (False, True), ("sar", "sa", "oneshot"), (1, 2, 4),
                                                        profiles, (None, 0)):
    if pname == "reference-laptop" and (bn or wph == 0):
        continue
    base = ModelSpec(model="gcn", layers=3, hidden=32, heads=2, batchnorm=bn, relations=3 if "rgcn" in label else 1)
    model = parse_model(label, base)
    stats = estimate_partition(20000, 300000, N, 32, 8)
    run = RunSpec(mode=mode, workers_per_host=wph)
    prof = profiles[pname]
    key = f"{label} bn={bn} {mode} N={N} {pname} wph={wph}"
    place = resolve_placement(prof, N, run)
    for vector in (False, True):
        pricing = EpochPricing(stats, model, run, prof, place, vector=vector)
        tables[f"{key} vector={vector}"] = {
            "layers": [{f.name: plain(getattr(t, f.name)) for f in dataclasses.fields(t) if f.name != "plan"}
                       for t in pricing.layers],
            "persistent": plain(pricing.persistent), "baseline": plain(pricing.baseline_bytes()),
            "share_eta": {repr(k): v for k, v in pricing.share_eta.items()}}
    res = simulate_epoch(stats, model, run, prof)
    epochs[key] = {k: plain(getattr(res, k)) for k in ("epoch_time_s", "compute_s", "comm_wait_s", "bytes_sent",
                                                     "bytes_recv", "peak_above_baseline_bytes", "baseline_bytes",
                                                     "events", "messages", "start_bytes", "end_bytes",
                                                     "activation_bytes", "compute_scale")}
(out / "pricing_tables.json").write_text(json.dumps(tables, sort_keys=True))
(out / "epochs.json").write_text(json.dumps(epochs, sort_keys=True, indent=0))

# ------------------------------------------------------------------ 3. sampling epochs
from sarlab.simulator.strategies.sampling_model import SamplingSpec, simulate_sampling_epoch  # noqa: E402

sampling = {}
for label, N, prefetch, rb, pname, shared in itertools.product(("gcn", "sage-mean", "gat-fused"), (1, 2, 4),
                                                               (True, False), (0, 1, 2),
                                                               ("epyc-2core", "icelake-hdr200"), (None, True)):
    model = parse_model(label, ModelSpec(model="gcn", layers=2, hidden=32, batchnorm=label == "sage-mean"))
    stats = estimate_partition(20000, 300000, N, 32, 8)
    run = RunSpec(workers_per_host=0, shared_cores=shared)
    s = simulate_sampling_epoch(stats, model, SamplingSpec((10, 5), 256, prefetch, rb), profiles[pname], run=run)
    sampling[f"{label} N={N} prefetch={prefetch} rb={rb} {pname} shared={shared}"] = plain(s)
(out / "sampling.json").write_text(json.dumps(sampling, sort_keys=True))

# ------------------------------------------------------------------ 4. figures (PNG bytes)
from sarlab.common.figures import plot_engine_bench, plot_fig2, plot_scaling  # noqa: E402
from sarlab.common.tables import MEASURED, SIMULATED  # noqa: E402
from sarlab.simulator.studies.plots import gantt, memory_plot, scaling_plot, validation_plot  # noqa: E402

figs = out / "figures"
figs.mkdir(exist_ok=True)
rows = []
for k, series in enumerate(("sar", "sar+fused", "vanilla (oneshot)", "other")):
    for N in (2, 4, 8):
        base_b = 2e9 / N + 1e8 * k
        above = 3e9 / N * (1 + k)
        rows.append({"series": series, "workers": N, "epoch_time_s": 10.0 / N * (1 + 0.3 * k),
                     "baseline_mem_bytes": base_b, "peak_mem_above_baseline_bytes": above,
                     "peak_mem_bytes": base_b + above, "oom": series == "vanilla (oneshot)" and N == 2,
                     "mem_scaling": N / 2 * 0.9})
table = pd.DataFrame(rows)
plot_scaling(table, figs / "scaling_measured.png", MEASURED, "measured banner " * 5, "a title", "workers (N)",
             per_worker_limit=4e9, limit_label="4 GB per node", scaling=True)
spread = table.drop(columns="oom").assign(epoch_time_s=table.epoch_time_s ** 2)  # a log time axis
plot_scaling(spread, figs / "scaling_simulated.png", SIMULATED, "simulated banner",
             "title two " * 20, "N", per_worker_limit=1e12, limit_label="1 TB")
small = table.assign(epoch_time_s=table.workers * 0 + 1.0 + table.workers * 0.01,
                     peak_mem_bytes=table.peak_mem_bytes / 1e3, baseline_mem_bytes=table.baseline_mem_bytes / 1e3,
                     peak_mem_above_baseline_bytes=table.peak_mem_above_baseline_bytes / 1e3)
plot_scaling(small, figs / "scaling_small.png", SIMULATED, "b", "t", "N")
fig2 = []
for impl, heads, phase in itertools.product(("pyg", "sar", "fused"), (1, 2, 4), ("forward", "backward", "fwd+bwd")):
    fig2.append({"impl": impl, "heads": heads, "phase": phase, "time_s": 0.01 * heads * (2 if impl == "pyg" else 1),
                 "peak_mem_bytes": 2**20 * heads * (3 if impl == "pyg" else 1), "speedup_vs_pyg": 2.0,
                 "mem_ratio_vs_pyg": 0.33})
plot_fig2(fig2, figs / "fig2.png", "banner", "fig 2")
bench = pd.DataFrame([{"label": lab, "mode": mode, "workers": N, "peak_mem_above_baseline_bytes": 2**20 * 100 / N,
                       "epoch_time_s": 1.0 / N + 0.1 * i}
                      for i, (lab, mode) in enumerate(itertools.product(("a", "b"), ("sar", "sa", "oneshot")))
                      for N in (1, 2, 4)])
plot_engine_bench(bench, str(figs / "engine_bench.png"), "engine bench " * 20)
stats = estimate_partition(20000, 300000, 4, 32, 8)
traced = simulate_epoch(stats, parse_model("gcn", ModelSpec(model="gcn")), RunSpec(trace=True),
                        profiles["epyc-2core"])
gantt(traced, figs / "gantt.png")
memory_plot(traced, figs / "sub" / "memory.png", title="mem")
summary = sarlab.simulator.simulate("estimate:nodes=20000,edges=300000,features=32,classes=8", (1, 2, 4),
                                    "gcn,sage-max,gat-fused", "sar,oneshot", "epyc-2core", summary=True)
summary.to_csv(out / "simulate_summary.csv", index=False)
scaling_plot(summary, figs / "scaling_plot.png")
val = pd.DataFrame([{"model": m, "aggr": "max", "mode": mode, "workers": N,
                     "measured_epoch_time_s": 1.0 + N, "predicted_epoch_time_s": 1.1 + N,
                     "predicted_epoch_time_probe_s": 1.1 + N, "predicted_epoch_time_static_s": 0.9 + N,
                     "measured_peak_above_baseline_bytes": 1e8 * N, "predicted_peak_above_baseline_bytes": 1.2e8 * N}
                    for m in ("gcn", "sage") for mode in ("sar", "oneshot") for N in (2, 4)])
validation_plot(val, figs / "validation.png")
(out / "figure_sha256.txt").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(figs)}\n"
                                               for p in sorted(figs.rglob("*.png"))))

# ------------------------------------------------------------------ 5. partitions (file bytes)
from sarlab.data.graphs import load_graph  # noqa: E402
from sarlab.data.partition import partition  # noqa: E402

parts_dir = out / "partitions"
lines = []
for spec, P, method in (("planetoid:cora", 2, "metis"), ("planetoid:cora", 3, "random"),
                        ("hetero:nodes=2000,seed=0", 3, "metis"), ("planetoid:citeseer", 1, "metis")):
    target = parts_dir / f"{spec.replace(':', '_').replace(',', '_').replace('=', '')}_{P}_{method}"
    partition(load_graph(spec), P, str(target), method=method, seed=0, source=spec)
    for f in sorted(target.rglob("*")):
        if f.is_file():
            lines.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(parts_dir)}\n")
(out / "partition_sha256.txt").write_text("".join(lines))

# ------------------------------------------------------------------ 6. roundbench --predict
pred = subprocess.run([sys.executable, "-m", "sarlab.real.calibration.roundbench", "--predict", "--world", "4",
                       "--patterns", "ring:0,ring:1,oneshot,global,global-a2a", "--profile", "epyc-2core",
                       "--net", "veth:rate=100mbit", "--out", str(out / "roundbench_predict.json")],
                      capture_output=True, text=True, env=os.environ, check=True)
(out / "roundbench_predict.txt").write_text(pred.stdout)
print("done", out)
