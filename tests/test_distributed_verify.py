"""Distributed outputs and gradients equal the single-process PyG reference, every mode and model.

Each test launches real worker processes over gloo (one process group runs many configurations).
"""
from __future__ import annotations

import pytest

from sarlab.core.config import EngineConfig
from sarlab.data.graphs import load_graph, synthetic_graph
from sarlab.nn.model import ModelConfig
from sarlab.real.commands.verify import format_table, verify

MODELS = [("gcn", "mean"), ("sage", "mean"), ("sage", "max"), ("sage", "pool")]
MODES = ("sar", "sa", "oneshot")


def _variants(dtypes, models=MODELS, modes=MODES, **kw):
    cfg = dict(layers=3, hidden=12, dropout=0.3, batchnorm=True, seed=2)
    cfg.update(kw)
    return [(ModelConfig(model=m, aggr=a, **cfg), EngineConfig(mode=mode, prefetch=1 + (i % 2)), dt)
            for dt in dtypes for mode in modes for i, (m, a) in enumerate(models)]


def _check(rows):
    table = format_table(rows)
    assert all(r.ok for r in rows), "\n" + table
    for r in rows:
        assert r.tol == (1e-5 if r.dtype == "float32" else 1e-10)
    print("\n" + table)


@pytest.fixture(scope="module")
def graph():
    # isolated nodes included: a few nodes with no edges at all
    return synthetic_graph(nodes=500, degree=5, features=10, classes=4, seed=11)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [pytest.param(1, marks=pytest.mark.slow), 2,
                                     pytest.param(3, marks=pytest.mark.slow), 4])  # 1 and 3 with -m slow
def test_synthetic_all_modes_models_fp64_and_fp32(graph, workers):
    rows = verify(graph, workers, _variants(["float64", "float32"]), timeout_s=120, progress=lambda m: None)
    assert len(rows) == 2 * len(MODES) * len(MODELS)
    _check(rows)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [2, 4])
def test_cora_all_modes(cora_path, workers):
    g = load_graph(f"npz:{cora_path}")
    rows = verify(g, workers, _variants(["float32", "float64"], models=MODELS[:3], hidden=16),
                  timeout_s=120, progress=lambda m: None)
    _check(rows)


@pytest.mark.timeout(600)
def test_random_partition_and_prefetch_depths(graph):
    """Random partitions (large halos) and prefetch 0 and 3 give the same results."""
    variants = [(ModelConfig(model=m, aggr=a, layers=2, hidden=8), EngineConfig(mode="sar", prefetch=d), "float64")
                for m, a in MODELS for d in (0, 3)]
    _check(verify(graph, 3, variants, method="random", timeout_s=120, progress=lambda m: None))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_eight_workers(graph):
    _check(verify(graph, 8, _variants(["float64", "float32"]), timeout_s=300, progress=lambda m: None))


def test_verify_detects_a_wrong_gradient(graph, monkeypatch):
    """The comparison is not vacuous: perturb one reference gradient and it must fail."""
    from sarlab.real.commands import verify as verify_mod

    real_reference = verify_mod.reference_step

    def skewed(*args, **kwargs):
        out = real_reference(*args, **kwargs)
        name = next(iter(out["grads"]))
        out["grads"][name] = out["grads"][name] * (1 + 1e-4)
        return out

    monkeypatch.setattr(verify_mod, "reference_step", skewed)
    rows = verify(graph, 2, _variants(["float32"], models=MODELS[:1], modes=("sar",)), progress=lambda m: None)
    assert not rows[0].ok and rows[0].grad_err > 1e-5
