"""The calibration's sparse microbenchmarks time the engine's own entry points (Shard.spmm, Aggregation('max'),
AttentionAggregation) and fit what they time by hand; a compute scale far from 1 is refused."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import sarlab.real.calibration.calibrate as calibrate_module
import sarlab.real.calibration.engine_runs as engine_runs
import sarlab.real.calibration.gatbench as gatbench
import sarlab.real.calibration.opbench as opbench
import sarlab.real.calibration.ranks as ranks
from sarlab import kernels
from sarlab.core.shards import Shard
from sarlab.nn.gat import AttentionAggregation
from sarlab.real.commands.calibrate_cmd import calibrate_main
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.hardware.plausibility import implausible_compute_scale
from sarlab.simulator.hardware.profile import load_profile, reference_laptop

QUICK = Calibration(quick=True, log=lambda line: None)
#: hand-picked rates: seconds per call o + w / r + v / r_row, backward 1.5x the forward
O, R, R_ROW, BWD = 2e-5, 4e9, 5e8, 1.5


class StubTimer:
    """``time_call`` that runs ``fn`` once (so the engine entry points are really called) and returns the next of
    the hand-computed times."""

    def __init__(self, times: list[float]):
        self.times, self.calls = list(times), 0

    def __call__(self, fn, repeats, warmup=1):
        fn()
        self.calls += 1
        return self.times.pop(0)


def _seconds(work: float, rows: float) -> float:
    return O + work / R + rows / R_ROW


def test_spmm_benchmark_times_shard_spmm_and_fits_it_by_hand(monkeypatch):
    """Four shapes (n, d, f): forward o + n d f / r + n f / r_row, backward 1.5x; the one shape with n f >= 100k
    (quick) also times the out-of-place transpose at 4 n f / 2e9 s more than the in-place one. The fit returns
    r = 4e9, o = 2e-5 s, r_row = 5e8, ratio 1.5 and fresh rate 2e9 B/s; every timed call goes through
    Shard.spmm in the engine's forms: A x and A^T g into a running state, A^T g fresh."""
    shapes = [(40, 2, 8), (40, 6, 8), (100, 3, 4), (500, 2, 200)]
    times = []
    for n, d, f in shapes:
        t = _seconds(n * d * f, n * f)
        times += [t, BWD * t] + ([BWD * t + 4 * n * f / 2e9] if n * f >= 100_000 else [])
    timer = StubTimer(times)
    calls = []
    original = Shard.spmm

    def spy(self, x, transpose=False, out=None, backend=None):
        calls.append((self.num_dst, transpose, out is not None))
        return original(self, x, transpose, out, backend)

    monkeypatch.setattr(opbench, "sparse_shapes", lambda cal, scale=1.0: shapes)
    monkeypatch.setattr(opbench, "time_call", timer)
    monkeypatch.setattr(Shard, "spmm", spy)
    found = Findings()
    cost = opbench.bench_spmm(QUICK, found, 1, torch.Generator().manual_seed(0))
    assert timer.calls == 9 and not timer.times
    assert cost.rate == pytest.approx(R, rel=1e-6) and cost.overhead_s == pytest.approx(O, rel=1e-6)
    assert cost.row_rate == pytest.approx(R_ROW, rel=1e-6) and cost.bwd_ratio == pytest.approx(BWD)
    assert cost.fresh_rate == pytest.approx(2e9, rel=1e-6) and cost.parallel_eff == 1.0
    expected = []
    for n, _, f in shapes:
        expected += [(n, False, True), (n, True, True)] + ([(n, True, False)] if n * f >= 100_000 else [])
    assert calls == expected
    assert found.raw["spmm"]["backend"] == kernels.backend()
    assert found.raw["spmm"]["entry"] == "sarlab.core.shards.Shard.spmm"
    assert any("Shard.spmm" in note for note in found.notes)


def test_spmm_benchmark_runs_the_engine_product():
    """The timed forward of a tiny shard adds A x into the state: compared with a dense adjacency built from the
    random CSR's rows (each destination's ``degree`` sources)."""
    gen = torch.Generator().manual_seed(3)
    shard = ranks.random_shard(30, 4, gen)
    dense = torch.zeros(30, 30, dtype=torch.float64)
    rowptr, col = ranks.random_csr(30, 30, 4, torch.Generator().manual_seed(3))
    for i in range(30):
        for k in range(int(rowptr[i]), int(rowptr[i + 1])):
            dense[i, int(col[k])] += 1
    x, state = torch.randn(30, 5, dtype=torch.float64), torch.ones(30, 5, dtype=torch.float64)
    shard.spmm(x, out=state)
    torch.testing.assert_close(state, 1 + dense @ x)
    grad = torch.zeros(30, 5, dtype=torch.float64)
    shard.spmm(x, transpose=True, out=grad)
    torch.testing.assert_close(grad, dense.T @ x)


def test_max_benchmark_times_the_engines_max_kernels_by_hand(monkeypatch):
    """bench_max over three shapes with forward o + n d f / r + n f / r_row and backward 1.5x recovers the rates;
    its forward is kernels.csr_max_shard and its backward kernels.csr_max_backward (through Aggregation('max'))."""
    shapes = [(40, 2, 8), (40, 6, 8), (100, 3, 4)]
    times = []
    for n, d, f in shapes:
        t = _seconds(n * d * f, n * f)
        times += [t, BWD * t]
    timer = StubTimer(times)
    seen = []
    forward, backward = kernels.csr_max_shard, kernels.csr_max_backward
    monkeypatch.setattr(kernels, "csr_max_shard", lambda *a, **k: seen.append("fwd") or forward(*a, **k))
    monkeypatch.setattr(kernels, "csr_max_backward", lambda *a, **k: seen.append("bwd") or backward(*a, **k))
    monkeypatch.setattr(opbench, "sparse_shapes", lambda cal, scale=1.0: shapes)
    monkeypatch.setattr(opbench, "time_call", timer)
    cost = opbench.bench_max(QUICK, Findings(), 1, torch.Generator().manual_seed(0))
    assert timer.calls == 6 and not timer.times
    assert cost.rate == pytest.approx(R, rel=1e-6) and cost.overhead_s == pytest.approx(O, rel=1e-6)
    assert cost.row_rate == pytest.approx(R_ROW, rel=1e-6) and cost.bwd_ratio == pytest.approx(BWD)
    assert seen.count("fwd") >= 3 and seen.count("bwd") == 3  # the finalize between them runs no kernel


@pytest.mark.parametrize(("bench", "fused", "autograd"), [
    (gatbench.bench_gat_fused, True, False),
    (gatbench.bench_gat_unfused, False, False),
    (gatbench.bench_gat_autograd, False, True),
])
def test_gat_benchmarks_time_the_layers_entry_points_by_hand(monkeypatch, bench, fused, autograd):
    """Shapes (n, d, H, C), work n d H C, rows n H C: forward o + w / r + v / r_row, backward 1.5x (the autograd
    form times forward + backward together, 2.5x, and subtracts the forward). Every call goes through
    AttentionAggregation of the form's ``fused`` flag (accumulate; shard_vjp without autograd, autograd.grad
    through accumulate with it)."""
    shapes = [(40, 2, 1, 8), (40, 6, 2, 8), (100, 3, 2, 4)]
    times = []
    for n, d, h, c in shapes:
        t = _seconds(n * d * h * c, n * h * c)
        times += [t, (1 + BWD) * t if autograd else BWD * t]
    timer = StubTimer(times)
    seen = []
    accumulate, vjp = AttentionAggregation.accumulate, AttentionAggregation.shard_vjp

    def spy_accumulate(self, *args):
        seen.append(("acc", self.fused, torch.is_grad_enabled()))
        return accumulate(self, *args)

    def spy_vjp(self, *args):
        seen.append(("vjp", self.fused, torch.is_grad_enabled()))
        return vjp(self, *args)

    monkeypatch.setattr(AttentionAggregation, "accumulate", spy_accumulate)
    monkeypatch.setattr(AttentionAggregation, "shard_vjp", spy_vjp)
    monkeypatch.setattr(gatbench, "gat_shapes", lambda cal: shapes)
    monkeypatch.setattr(gatbench, "time_call", timer)
    cost = bench(QUICK, Findings(), 1, torch.Generator().manual_seed(0))
    assert timer.calls == 6 and not timer.times
    assert cost.rate == pytest.approx(R, rel=1e-6) and cost.overhead_s == pytest.approx(O, rel=1e-6)
    assert cost.row_rate == pytest.approx(R_ROW, rel=1e-6) and cost.bwd_ratio == pytest.approx(BWD)
    assert {fl for _, fl, _ in seen} == {fused}
    kinds = {(kind, grad) for kind, _, grad in seen}
    assert kinds == ({("acc", True)} if autograd else {("acc", False), ("vjp", False)})


def test_compute_scale_far_from_1_is_flagged(tmp_path, monkeypatch, capsys):
    """Campaign 9's 0.46 (engine epochs under the block cache, spmm timed on torch.sparse) is outside [0.5, 2]:
    flagged in the log, the notes and meta, and written (calibrating again would not change it); 0.5, 1 and 2
    pass."""
    assert [implausible_compute_scale(s) for s in (0.5, 1.0, 2.0)] == [[], [], []]
    assert len(implausible_compute_scale(0.46)) == 1 and len(implausible_compute_scale(2.1)) == 1
    monkeypatch.setattr(calibrate_module, "_measure_ops", lambda cal, found, cores, total: dict(reference_laptop().ops))
    monkeypatch.setattr(calibrate_module, "_measure_memory", lambda cal, found: (1.0, {}, {}))
    monkeypatch.setattr(calibrate_module, "_fit_engine", lambda cal, found, prof: replace(prof, compute_scale=0.46))
    out = tmp_path / "p.json"
    assert calibrate_main(["--out", str(out), "--no-network", "--threads", "1"]) == 0
    assert "compute_scale 0.460" in capsys.readouterr().err
    prof = load_profile(out)
    assert prof.compute_scale == 0.46 and prof.meta["implausible"] == []
    assert [line.split(" ")[0] for line in prof.meta["compute_scale_flag"]] == ["compute_scale"]
    assert prof.notes[0].startswith("IMPLAUSIBLE compute_scale 0.460")


def test_engine_epochs_run_in_the_microbenchmarks_allocator_regime(tmp_path, monkeypatch):
    """The calibration's engine epochs are ``sarlab train --memory rss`` runs (glibc with the engine's thresholds,
    as the op microbenchmarks and the validation runs), unless asked otherwise."""
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        raise RuntimeError("stop here")

    monkeypatch.setattr(engine_runs.subprocess, "run", fake_run)
    for memory in (None, "live"):
        kwargs = {} if memory is None else {"memory": memory}
        with pytest.raises(RuntimeError, match="stop here"):
            engine_runs.engine_epoch("synthetic:nodes=100", "gcn", 2, 8, 2, tmp_path / "p", **kwargs)
    assert [cmd[cmd.index("--memory") + 1] for cmd in seen] == ["rss", "live"]
