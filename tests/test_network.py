"""The emulated cluster network (``--net veth:...``): spec parsing, numbers identical to loopback, shaping measured,
link cuts named, torchrun across emulated hosts, and nothing of sarlab's left in ``ip netns`` / ``ip link``.

Tests that build namespaces need root and ``ip``/``tc`` (CI runs as root) and are skipped, with the reason, without.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from backends_common import BACKENDS, BACKENDS_CCL_SLOW, built
from conftest import ROOT, run_cli
from faults_common import assert_nothing_left, run_sarlab

from sarlab.core.config import EngineConfig
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition
from sarlab.data.staging import pid_alive
from sarlab.nn.model import ModelConfig
from sarlab.real.bench import netbench
from sarlab.real.launch import netns
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.real.launch.netspec import NetSpec
from sarlab.training.trainer import TrainConfig


def _why_no_network() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth links and qdiscs are privileged)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    return f"needs {' and '.join(missing)} (iproute2)" if missing else None


needs_network = pytest.mark.skipif(_why_no_network() is not None, reason=_why_no_network() or "")


def _left_behind(pid: int) -> list[str]:
    """Namespaces of launcher ``pid`` that still exist, and any sarlab link in the root namespace."""
    names = [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}-{pid}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return names + [line for line in links.splitlines() if netns.PREFIX in line]


@pytest.mark.parametrize("text, expected", [
    ("loopback", "loopback"), ("", "loopback"), ("veth:rate=200mbit", "veth:rate=200mbit"),
    ("veth:rate=1gbit,hosts=2", "veth:rate=1gbit,hosts=2"), ("veth:hosts=4,rate=1000mbit", "veth:rate=1gbit,hosts=4"),
    ("veth:rate=1.5Gbit", "veth:rate=1500mbit"), ("veth:rate=800kbit", "veth:rate=800kbit"),
])
def test_spec_parses_to_canonical_form(text, expected):
    assert str(NetSpec.parse(text)) == expected
    assert NetSpec.parse(expected) == NetSpec.parse(text)


def test_spec_rates_and_hosts():
    spec = NetSpec.parse("veth:rate=200mbit,hosts=2")
    assert spec.rate_bps == 200_000_000 and spec.bytes_per_s == 25e6
    assert spec.hosts_for(4) == 2 and NetSpec.parse("veth:rate=1mbit").hosts_for(3) == 3
    assert NetSpec.parse("loopback").hosts_for(5) == 1


@pytest.mark.parametrize("text, needle", [
    ("veth:rate=200mb", "bad rate '200mb'"), ("veth:rate=200", "bad rate '200'"),
    ("veth:rate=fast", "bad rate"), ("veth", "needs a link rate"), ("veth:hosts=2", "needs a link rate"),
    ("veth:rate=1mbit,hosts=0", "hosts must be a whole number"), ("veth:rate=1mbit,hosts=two", "whole number"),
    ("veth:rate=1mbit,mtu=9000", "unknown option(s) mtu"), ("veth:rate=1mbit,rate=2mbit", "given twice"),
    ("veth:rate", "write key=value"), ("tap:rate=1mbit", "unknown network spec"), ("veth:rate=1bit", "outside"),
])
def test_spec_errors_say_what_is_wrong(text, needle):
    with pytest.raises(ValueError) as err:
        NetSpec.parse(text)
    assert needle in str(err.value)


def test_hosts_must_divide_workers():
    with pytest.raises(ValueError, match="3 workers cannot be spread evenly over hosts=2"):
        NetSpec.parse("veth:rate=1mbit,hosts=2").hosts_for(3)


def test_cli_rejects_bad_spec_and_cut_without_network():
    res = run_cli(["train", "--graph", "synthetic:nodes=50", "--net", "veth:rate=10mb"], timeout=60)
    assert res.returncode == 2 and "bad rate '10mb'" in res.stderr, res.stderr
    res = run_cli(["train", "--graph", "synthetic:nodes=50", "--fault", "1:1:cut"], timeout=60)
    assert res.returncode != 0 and "needs an emulated network" in res.stderr, res.stderr


@needs_network
@pytest.mark.parametrize("env, needle", [({"PATH": "/nonexistent"}, "needs ip and tc")])
def test_clear_error_before_anything_is_created(env, needle):
    res = run_cli(["train", "--graph", "synthetic:nodes=50", "--net", "veth:rate=10mbit"], timeout=60, env=env)
    assert res.returncode != 0 and needle in res.stderr, res.stdout + res.stderr
    assert "loading graph" not in res.stderr  # refused before the graph was even generated


@needs_network
def test_clear_error_when_not_root():
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv (util-linux) to drop root")
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    env = dict(os.environ, HOME="/tmp")
    probe = subprocess.run([*drop, "-c", "import sarlab.real.commands.cli"], capture_output=True, text=True,
                            timeout=120, cwd=ROOT,
                           env=env)
    if probe.returncode != 0:  # e.g. a checkout under a 0700 directory: nobody cannot even import the code
        pytest.skip(f"an unprivileged user cannot run this checkout: {probe.stderr.strip().splitlines()[-1:]}")
    cmd = [*drop, "-m", "sarlab", "train", "--graph", "synthetic:nodes=50", "--net", "veth:rate=10mbit"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert res.returncode != 0 and "--net veth needs root" in res.stderr, res.stdout + res.stderr


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    g = synthetic_graph(nodes=400, degree=8, features=12, classes=4, seed=5)
    root = tmp_path_factory.mktemp("net")
    out = {}
    for n in (2, 3):
        out[n] = str(root / f"p{n}")
        partition(g, n, out[n])
    return out


def _by_rank_epoch(records: list[dict]) -> dict:
    return {(r["rank"], r["epoch"]): r for r in records}


@needs_network
@pytest.mark.timeout(400)
@pytest.mark.parametrize("workers", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_veth_is_bit_exact_with_loopback(parts, workers):
    """fp64 loss curve, accuracies, bytes, and every rank's outputs and gradients: identical bits on both networks."""
    model = ModelConfig(model="sage", layers=2, hidden=8, dropout=0.5, seed=1)
    train = Job("train", parts[workers], model, TrainConfig(epochs=4, lr=0.05, dtype="float64", eval_every=2),
                EngineConfig(mode="sar"), timeout_s=60, quiet=True)
    curves = {net: _by_rank_epoch(launch(train, workers, net=net)) for net in ("loopback", "veth:rate=200mbit")}
    loop, veth = curves["loopback"], curves["veth:rate=200mbit"]
    assert set(loop) == set(veth) and len(loop) == 4 * workers
    for key, rec in loop.items():
        for col in ("loss", "train_acc", "val_acc", "bytes_sent", "bytes_recv"):
            same = rec[col] == veth[key][col] or (rec[col] != rec[col] and veth[key][col] != veth[key][col])
            assert same, f"{col} at (rank, epoch) {key}: {rec[col]!r} on loopback, {veth[key][col]!r} on veth"
        assert rec["net"] == "loopback" and veth[key]["net"] == "veth:rate=200mbit"
    if workers == 2:  # gradients directly (at N = 3 `sarlab verify --net` below checks them against PyG)
        variants = tuple((model, EngineConfig(mode=m), "float64") for m in ("sar", "oneshot"))
        verify = Job("verify", parts[workers], model, TrainConfig(dtype="float64"), EngineConfig(), timeout_s=60,
                     variants=variants)
        out = {net: launch(verify, workers, net=net) for net in ("loopback", "veth:rate=200mbit")}
        for rank, (a, b) in enumerate(zip(out["loopback"], out["veth:rate=200mbit"])):
            for i, _ in enumerate(variants):
                assert torch.equal(a[i]["logits"], b[i]["logits"]) and a[i]["loss"] == b[i]["loss"]
                for name, grad in a[i]["grads"].items():
                    assert torch.equal(grad, b[i]["grads"][name]), f"rank {rank} variant {i}: {name} differs"
    assert not _left_behind(os.getpid())


@needs_network
@pytest.mark.timeout(300)
def test_verify_cli_passes_on_veth():
    res = run_cli(["verify", "--graph", "synthetic:nodes=300,degree=6,features=8,classes=3,seed=2", "--workers", "3",
                   "--dtype", "float64", "--model", "sage,gcn", "--net", "veth:rate=100mbit"], timeout=280)
    assert res.returncode == 0 and "(ok)" in res.stdout, res.stdout + res.stderr
    assert "network: 3 emulated host(s)" in res.stderr


@needs_network
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_verify_cli_passes_on_shared_hosts():
    """N = 4 on 2 hosts (two workers share each link), every model and mode."""
    res = run_cli(["verify", "--graph", "synthetic:nodes=400,degree=6,features=8,classes=3,seed=2", "--workers", "4",
                   "--dtype", "float64", "--model", "sage,gcn,gat", "--net", "veth:rate=100mbit,hosts=2"],
                  timeout=580)
    assert res.returncode == 0 and "(ok)" in res.stdout, res.stdout + res.stderr


def _cut(pdir: str, workers: int, net: str, rank: int, tmp_path, backend: str = "gloo", timeout: float = 5.0):
    """``sarlab train`` whose ``rank`` cuts its host's link at epoch 1 (in a fresh working directory and $TMPDIR)."""
    return run_sarlab(["train", "--graph", pdir, "--workers", str(workers), "--epochs", "6", "--hidden", "8",
                       "--eval-every", "0", "--net", net, "--fault", f"{rank}:1:cut", "--timeout", str(timeout),
                       "--backend", built(backend)], tmp_path, timeout=240)


@needs_network
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_link_cut_names_the_rank_and_leaves_nothing(parts, tmp_path, backend):
    """Every rank's wait times out (the cut rank's too): the rank whose link is down is named, within the timeout
    + 30 s (+ start-up), and nothing of the run is left (processes, namespaces, links, files)."""
    run = _cut(parts[3], 3, "veth:rate=100mbit", 1, tmp_path, backend)
    text = run.text
    assert run.returncode != 0, text
    assert "rank 1 failed: unreachable" in text and "host 1" in text, text
    assert "Traceback" not in run.stderr.split("rank 1 failed")[0]
    assert run.elapsed < 5 + 30 + 60, f"took {run.elapsed:.0f}s (timeout 5 s + 30 s + start-up)\n{text}"
    assert_nothing_left(run)
    assert not _left_behind(run.pid)
    assert not [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}-")
                and not pid_alive(int(n.split("-")[1]))], "namespaces of a dead launcher remain"


@needs_network
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("run", range(5))
@pytest.mark.parametrize("backend", BACKENDS)
def test_link_cut_repeatedly_and_on_a_shared_host(tmp_path_factory, tmp_path, backend, run):
    pdir = str(tmp_path_factory.mktemp("cut4") / "p4")
    partition(synthetic_graph(nodes=400, degree=8, features=12, classes=4, seed=run), 4, pdir)
    res = _cut(pdir, 4, "veth:rate=100mbit,hosts=2", 3, tmp_path, backend)
    text = res.text
    assert res.returncode != 0 and "unreachable" in text and "rank(s) [2, 3]" in text, text
    assert res.elapsed < 5 + 30 + 60, text
    assert_nothing_left(res)


@needs_network
def test_leftovers_of_a_dead_launcher_are_removed():
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = [f"{netns.PREFIX}-{dead.pid}-0-h0", f"{netns.PREFIX}-{dead.pid}-0-sw"]
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    notes: list[str] = []
    try:
        removed = netns.remove_leftovers(notes.append)
    finally:
        for name in set(names) & set(netns.namespaces()):
            subprocess.run(["ip", "netns", "delete", name])
    assert sorted(removed) == sorted(names)
    assert any(f"dead launcher (pid {dead.pid})" in note for note in notes), notes
    assert not set(names) & set(netns.namespaces())


@needs_network
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_measured_bandwidth_is_the_configured_rate(tmp_path, capsys, backend):
    """One way and both ways at once, each direction of the link carries its rate (payload ~95 % of the wire rate,
    plain TCP, one connection per direction); the backend one way too (gloo, or ccl with --backend ccl: the link
    profile says which). Gloo both ways on its one connection per pair may stall a direction (at worst the two run
    one after the other) but never exceeds the rate."""
    out = tmp_path / "link.json"
    args = ["--net", "veth:rate=80mbit", "--seconds", "1", "--repeats", "3", "--backend", built(backend)]
    assert netbench.main([*args, "--out", str(out)]) == 0
    prof = json.loads(out.read_text())
    assert prof["backend"] == backend and prof["method"].startswith(f"{backend} send/recv")
    assert f"{backend}, one way" in capsys.readouterr().out
    rate = 80e6 / 8
    for key in ("tcp_bandwidth_Bps", "tcp_bandwidth_bidir_Bps", "bandwidth_Bps"):
        assert 0.90 * rate <= prof[key] <= 1.01 * rate, f"{key} = {prof[key] / 1e6:.2f} MB/s for a 10 MB/s link"
    assert 0.45 * rate <= prof["bandwidth_bidir_Bps"] <= 1.01 * rate, prof["bandwidth_bidir_Bps"]
    assert prof["schema"] == netbench.SCHEMA and prof["rate_bps"] == 80_000_000 and 0 < prof["latency_s"] < 0.1
    assert not _left_behind(os.getpid())


@needs_network
@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend", BACKENDS_CCL_SLOW)
def test_torchrun_across_two_emulated_hosts_matches_the_launcher(parts, tmp_path, backend):
    """One torchrun per host namespace, c10d rendezvous on host 0's address: the same fp64 loss curve. The ranks
    are told the host's interface as the launcher tells its workers (:data:`netns.IFACE_ENV`: gloo's, oneCCL's
    key-value store's and libfabric's variables)."""
    args = ["train", "--graph", parts[2], "--epochs", "4", "--hidden", "8", "--dtype", "float64", "--eval-every",
            "0", "--timeout", "60", "--backend", built(backend)]
    single = tmp_path / "single.json"
    res = run_cli([*args, "--workers", "2", "--json", str(single)], timeout=200)
    assert res.returncode == 0, res.stdout + res.stderr
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    network = netns.EmulatedNetwork(NetSpec.parse("veth:rate=200mbit"), 2)
    outs = [tmp_path / f"host{h}.json" for h in range(2)]
    with network:
        procs = []
        for h in range(2):
            cmd = [*network.command(h), torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"{network.address(0)}:29400", "--rdzv-id", "sarlab-test",
                   "--local-addr", network.address(h), "--rdzv-conf", f"is_host={int(h == 0)}",
                   "-m", "sarlab", *args, "--json", str(outs[h])]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, **netns.IFACE_ENV),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        logs = []
        try:
            for p in procs:
                logs.append(p.communicate(timeout=300)[0])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    records = [r for out in outs if out.exists() for r in json.loads(out.read_text())]
    want = _by_rank_epoch(json.loads(single.read_text()))
    got = _by_rank_epoch(records)
    assert set(got) == set(want)
    assert [got[k]["loss"] for k in sorted(got)] == [want[k]["loss"] for k in sorted(want)]
    assert {r["net"] for r in records} == {"env"} and {r["backend"] for r in records} == {backend}
    assert not _left_behind(os.getpid())
