"""What ``sarlab reproduce`` runs: the figure recipes and the plan of steps and units with their parameters.

A *step* is a group of figures regenerated together (``fig2``, ``fig3_fig4``, ``fig5_fig6``, ``fig7``, ``fig8``,
``accuracy``); a *unit* is one figure (or the accuracy table), measured here or simulated, described by a dict of
everything its outputs depend on. The driver
(:mod:`sarlab.real.reproduce.reproduce`) runs the units (:mod:`sarlab.real.reproduce.reproduce_units`) and
caches them (:mod:`sarlab.real.reproduce.step_cache`).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sarlab import simulator as sarlab_simulator
from sarlab.common.tables import MEASURED, SIMULATED
from sarlab.real.reproduce.accuracy_table import AccuracyConfig
from sarlab.real.reproduce.fig7 import Fig7Config
from sarlab.real.reproduce.fig8 import Fig8Config
from sarlab.real.reproduce.step_cache import params_sha
from sarlab.simulator.hardware.profile import PRESETS, load_profile

SIMULATOR_DIR = Path(sarlab_simulator.__file__).resolve().parent  # the simulator's sources (checkout or installed)
STEPS = ("fig2", "fig3_fig4", "fig5_fig6", "fig7", "fig8", "accuracy")
ALIASES = {"fig2": "fig2", "fig3": "fig3_fig4", "fig4": "fig3_fig4", "fig3_fig4": "fig3_fig4",
           "fig5": "fig5_fig6", "fig6": "fig5_fig6", "fig5_fig6": "fig5_fig6", "fig7": "fig7", "fig8": "fig8",
           "accuracy": "accuracy"}
#: unit names of the steps with one unit (their outputs are named after them)
FIG7_UNIT, FIG8_UNIT, ACCURACY_UNIT = "fig7_rgcn_mag-like_measured", "fig8_mfg_label_aug_products-like_measured", \
    "accuracy"
FIG7_SIMULATED_UNIT = "fig7_rgcn_mag-like_simulated"

#: the two models of figures 3-6 (GAT's hidden is the concatenated width: 4 heads x 32)
MODELS = {
    "sage": {"model": "sage", "layers": 3, "hidden": 256, "heads": 1, "aggr": "mean"},
    "gat": {"model": "gat", "layers": 3, "hidden": 128, "heads": 4, "aggr": "mean"},
}
#: (label on the figure, `sarlab bench engine` mode spec, simulator mode, fused GAT kernels)
SERIES = {
    "sage": [("sar", "sar", "sar", False), ("vanilla (oneshot)", "oneshot", "oneshot", False)],
    "gat": [("sar", "sar", "sar", False), ("sar+fused", "sar+fused", "sar", True),
            ("vanilla (oneshot)", "oneshot", "oneshot", False)],
}
PRODUCTS_LIKE = {"degree": 50, "features": 100, "classes": 47}
#: edge-cut fraction assumed for the estimated METIS partitions of the OGB graphs (the simulator's tests use
#: the same figures); a random partition would cut (N-1)/N of the edges
EDGE_CUT = {"ogbn-products": 0.2, "ogbn-papers100M": 0.3}

FULL = {
    "fig2": {"nodes": 20_000, "degree": 50, "heads": [2, 4, 8], "reps": 5, "quick_base": False},
    "measured": {"sage": {"nodes": 200_000, **PRODUCTS_LIKE, "hidden": 256},
                 "gat": {"nodes": 60_000, **PRODUCTS_LIKE, "hidden": 128},
                 "workers": [2, 4, 8], "epochs": 3},
    "products_workers": [4, 8, 16],
    "papers_workers": [32, 64, 128],
    "mag_workers": [4, 8, 16],
    "fig7": Fig7Config(),
    # fig8 trains the paper's 100 epochs (about 4 min on a quiet 2-core machine); the accuracy table 50 epochs
    # (5 seeds x 3 models x 3 variants x 2 graphs, about 30 min), the 5 seeds
    "fig8": Fig8Config(epochs=100),
    "accuracy": AccuracyConfig(epochs=50, seeds=(0, 1, 2, 3, 4), parallel=3),
}
QUICK = {
    "fig2": {"nodes": 600, "degree": 8, "heads": [2, 4, 8], "reps": 1, "quick_base": True},
    "measured": {"sage": {"nodes": 1500, "degree": 8, "features": 16, "classes": 8, "hidden": 32},
                 "gat": {"nodes": 1000, "degree": 8, "features": 16, "classes": 8, "hidden": 32},
                 "workers": [2], "epochs": 2},
    "products_workers": [4, 8],
    "papers_workers": [32, 64],
    "mag_workers": [4, 8],
    "fig7": Fig7Config(graph="hetero:nodes=3000,features=16,classes=8,reverse=1,seed=0", hidden=32, workers=(2, 4),
                       epochs=2, series=("sar", "oneshot")),
    "fig8": Fig8Config(graph="synthetic:nodes=2000,degree=8,features=16,classes=8,seed=0,train=0.02,val=0.1",
                       epochs=6, eval_every=2, rate_epochs=2, workers=2, hidden=16),
    "accuracy": AccuracyConfig(graphs=AccuracyConfig.graphs[:1], models=("gcn", "gat"), seeds=(0,), check_workers=2,
                               epochs=5),
}


def simulator_source_sha() -> str:
    """Hash of the simulator's Python sources (a parameter of every simulated unit)."""
    h = hashlib.sha256()
    for path in sorted(SIMULATOR_DIR.rglob("*.py")):
        h.update(str(path.relative_to(SIMULATOR_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def profile_identity(spec: str) -> dict[str, str]:
    """Name, where it comes from, and a hash of the profile's content (a parameter of simulated units)."""
    profile = load_profile(spec)
    where = (f"preset '{spec}' from simulator/hardware/profile.py, {profile.meta.get('machine', 'assumed figures')}"
             if spec in PRESETS else f"profile file {Path(spec).resolve()}")
    return {"name": profile.name, "where": where, "sha": params_sha(profile.to_json())}


def build_plan(quick: bool, profile: str) -> dict[str, dict[str, dict[str, Any]]]:
    """step -> unit -> the unit's parameters (everything its outputs depend on)."""
    cfg = QUICK if quick else FULL
    mode = "quick" if quick else "full"
    plan: dict[str, dict[str, dict[str, Any]]] = {
        "fig2": {"fig2_gat_layer": {"kind": MEASURED, "figure": "fig2", "run": mode, **cfg["fig2"]}}
    }
    prof = profile_identity(profile)
    sim_sha = simulator_source_sha()

    def simulated(figs: tuple[str, str], graph: str, workers: list[int], memory_scaling: bool) -> dict:
        """The simulated units of SAGE (first figure) and GAT (second) on an OGB preset."""
        return {
            f"{fig}_{model}_{graph}_{SIMULATED}": {
                "kind": SIMULATED, "figure": fig, "run": mode, "graph": graph, "edge_cut": EDGE_CUT[graph],
                "workers": workers, "model": MODELS[model], "series": SERIES[model],
                "profile": profile, "profile_sha": prof["sha"], "simulator_sha": sim_sha, "prefetch": 1,
                "memory_scaling": memory_scaling,
            }
            for fig, model in zip(figs, ("sage", "gat"))
        }

    step34 = simulated(("fig3", "fig4"), "ogbn-products", cfg["products_workers"], memory_scaling=False)
    for fig, model in (("fig3", "sage"), ("fig4", "gat")):
        m = cfg["measured"]
        graph = {k: m[model][k] for k in ("nodes", "degree", "features", "classes")}
        step34[f"{fig}_{model}_products-like_{MEASURED}"] = {
            "kind": MEASURED, "figure": fig, "run": mode, "graph": {**graph, "seed": 0},
            "model": {**MODELS[model], "hidden": m[model]["hidden"]}, "series": SERIES[model],
            "workers": m["workers"], "epochs": m["epochs"], "prefetch": 1,
        }
    plan["fig3_fig4"] = step34
    plan["fig5_fig6"] = simulated(("fig5", "fig6"), "ogbn-papers100M", cfg["papers_workers"], memory_scaling=True)
    for step, unit in (("fig7", FIG7_UNIT), ("fig8", FIG8_UNIT), ("accuracy", ACCURACY_UNIT)):
        config = {k: v for k, v in asdict(cfg[step]).items() if k != "timeout_s"}
        plan[step] = {unit: {"kind": MEASURED, "figure": step, "run": mode, "config": config}}
    # figure 7's second panel: R-GCN on ogbn-mag itself at the paper's N, simulated (sarlab.simulator.studies.fig7)
    plan["fig7"][FIG7_SIMULATED_UNIT] = {
        "kind": SIMULATED, "figure": "fig7", "run": mode, "graph": "ogbn-mag", "workers": cfg["mag_workers"],
        "profile": profile, "profile_sha": prof["sha"], "simulator_sha": sim_sha,
    }
    return plan


def unit_outputs(unit: str, params: dict[str, Any]) -> dict[str, str]:
    """File name -> kind (measured/simulated) of everything a unit writes."""
    if params["figure"] == "fig7" and params["kind"] == MEASURED:
        return {f"{unit}{end}": MEASURED for end in (".png", ".csv", "_ratios.csv", "_records.csv")}
    if params["figure"] == "fig8":
        return {f"{unit}{end}": MEASURED for end in (".png", "_curves.csv", "_rates.csv")}
    if params["figure"] == "accuracy":
        return {f"{unit}{end}": MEASURED for end in (".md", ".csv", "_summary.csv")}
    files = {f"{unit}.png": params["kind"], f"{unit}.csv": params["kind"]}
    if params["kind"] == MEASURED and params["figure"] != "fig2":
        files[f"{unit}_records.csv"] = MEASURED
    return files


def select_steps(only: str | None) -> list[str]:
    """The steps to run, in order; ``only`` is a comma list of steps or figure names."""
    if not only:
        return list(STEPS)
    wanted = set()
    for name in only.split(","):
        name = name.strip().lower()
        if not name:
            continue
        if name not in ALIASES:
            raise ValueError(f"unknown step {name!r} in --only: choose from {', '.join(STEPS)} (or fig2..fig8)")
        wanted.add(ALIASES[name])
    return [s for s in STEPS if s in wanted]


