"""The ``ccl`` torch.distributed backend (:mod:`sarlab.kernels.ccl`) in 2 and 3 real processes on loopback.

Each test runs this file as a script in ``world`` child processes (``python test_ccl_backend.py SCENARIO RANK
WORLD PORT``) that join one process group over a TCP store on 127.0.0.1 and check every op against values
computed independently (numpy on inputs that every rank can regenerate from the ranks' seeds); the op checks
(``test_ops``) share one such run per world size, every check in turn in one process group. The parent kills
the children's process groups on its hard timeout, so no child outlives a test, and fails with their output.
Skipped only when :func:`sarlab.kernels.ccl.available` says a library is missing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import pytest
from backends_common import require_ccl

HARD_TIMEOUT_S = 240  # per test, for all children together (the first one may wait for the build)
DEAD_PEER_TIMEOUT_S = 4  # the process group timeout in the dead-peer tests


# ------------------------------------------------------------------------------------------- child side


def _inputs(rank: int, n: int, dtype):
    import numpy as np

    return np.random.default_rng(1000 + rank).standard_normal(n).astype(dtype)


def _check_allreduce(rank: int, world: int) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    n = 1_000_003
    x = torch.from_numpy(_inputs(rank, n, np.float64))
    dist.all_reduce(x)
    want = np.sum([_inputs(r, n, np.float64) for r in range(world)], axis=0)
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-12, atol=1e-12)

    x = torch.from_numpy(_inputs(rank, 4099, np.float32))
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    want = np.sum([_inputs(r, 4099, np.float32).astype(np.float64) for r in range(world)], axis=0) / world
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-5, atol=1e-5)

    ints = [np.arange(1000, dtype=np.int64) * (r + 1) - 7 * r for r in range(world)]
    for dtype in (torch.int64, torch.int32):
        for op, fn in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.MAX, np.max), (dist.ReduceOp.MIN, np.min)):
            x = torch.from_numpy(ints[rank].copy()).to(dtype)
            dist.all_reduce(x, op=op)
            assert np.array_equal(x.numpy(), fn(ints, axis=0)), (dtype, op)
    x = torch.tensor([rank + 1, 2, 3], dtype=torch.int64)
    dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
    assert x.tolist() == [int(np.prod(np.arange(1, world + 1))), 2**world, 3**world]

    u = torch.tensor([rank * 40, 255 - rank, 7], dtype=torch.uint8)
    dist.all_reduce(u, op=dist.ReduceOp.MAX)
    assert u.tolist() == [(world - 1) * 40, 255, 7]
    b = torch.tensor([rank == 0, False, True])
    dist.all_reduce(b)  # logical or
    assert b.tolist() == [True, False, True]
    b = torch.tensor([rank == 0, True])
    dist.all_reduce(b, op=dist.ReduceOp.PRODUCT)  # logical and
    assert b.tolist() == [False, True]

    w = dist.all_reduce(torch.ones(10), async_op=True)
    assert w.wait() and w.is_completed()
    try:
        dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BXOR)
    except (RuntimeError, ValueError) as e:
        assert "ccl" in str(e), e
    else:
        raise AssertionError("BXOR should be refused")


def _check_alltoall(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    def splits(src: int, dst: int) -> int:  # rows src sends to dst: unequal, some zero
        return (3 * src + 5 * dst + src * dst) % 4

    def block(src: int, dst: int) -> torch.Tensor:  # (rows, 3) with values naming src, dst, row
        k = splits(src, dst)
        return torch.stack([torch.full((k,), src), torch.full((k,), dst), torch.arange(k)], 1).double()

    ins = [splits(rank, q) for q in range(world)]
    outs = [splits(q, rank) for q in range(world)]
    inp = torch.cat([block(rank, q) for q in range(world)])
    out = torch.full((sum(outs), 3), -1.0, dtype=torch.float64)
    dist.all_to_all_single(out, inp, output_split_sizes=outs, input_split_sizes=ins)
    assert torch.equal(out, torch.cat([block(q, rank) for q in range(world)])), out

    inp = torch.arange(world * 4, dtype=torch.int32) + 100 * rank  # equal splits
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.int32) + 100 * q for q in range(world)])
    assert torch.equal(out, want), out


def _check_p2p(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # ring, receives posted first (as sarlab.core.comm does), 3 messages to the same peer of distinct sizes
    sizes = [5, 300_000, 1]
    recvs = [torch.zeros(s) for s in sizes]
    ops = [dist.P2POp(dist.irecv, t, prv, tag=7) for t in recvs]
    ops += [dist.P2POp(dist.isend, torch.full((s,), 10.0 * rank + k), nxt, tag=7) for k, s in enumerate(sizes)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for k, t in enumerate(recvs):
        assert torch.all(t == 10.0 * prv + k), (k, t[:3])

    # every pair exchanges; even ranks post sends first, odd ranks receives first; tags differ per batch
    for it in range(3):
        peers = [q for q in range(world) if q != rank]
        got = {q: torch.zeros(1000 + q + rank, dtype=torch.int64) for q in peers}
        rops = [dist.P2POp(dist.irecv, got[q], q, tag=it) for q in peers]
        sops = [dist.P2POp(dist.isend, torch.full((1000 + q + rank,), 100 * rank + q + it), q, tag=it) for q in peers]
        for w in dist.batch_isend_irecv(sops + rops if rank % 2 == 0 else rops + sops):
            w.wait()
        for q in peers:
            assert torch.all(got[q] == 100 * q + rank + it), (it, q, got[q][:3])

    # blocking send/recv around the ring, then unbatched isend/irecv to the same peer in order
    if rank == 0:
        dist.send(torch.tensor([42.0]), nxt)
        t = torch.zeros(1)
        dist.recv(t, prv)
        assert t.item() == 42.0 + world - 1
    else:
        t = torch.zeros(1)
        dist.recv(t, prv)
        dist.send(t + 1, nxt)
    works, outs = [], [torch.zeros(7 - k, dtype=torch.uint8) for k in range(4)]
    for k in range(4):
        works.append(dist.isend(torch.full((4 - k,), k, dtype=torch.uint8), nxt))
        works.append(dist.irecv(outs[k][: 4 - k], prv))
    for w in works:
        w.wait()
    for k in range(4):
        assert outs[k][: 4 - k].tolist() == [k] * (4 - k), outs


def _check_collectives(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    root = world - 1
    t = torch.arange(100, dtype=torch.float64) * (rank + 1)
    dist.broadcast(t, src=root)
    assert torch.equal(t, torch.arange(100, dtype=torch.float64) * world)

    outs = [torch.zeros(6, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.arange(6) + 10 * rank)
    for q in range(world):
        assert torch.equal(outs[q], torch.arange(6) + 10 * q), outs

    flat = torch.zeros(world * 3)
    dist.all_gather_into_tensor(flat, torch.full((3,), float(rank)))
    assert flat.tolist() == [float(q) for q in range(world) for _ in range(3)]

    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * (50 * rank + 1)})
    assert objs == [{"rank": q, "pad": "x" * (50 * q + 1)} for q in range(world)], objs

    # barrier: rank 0 arrives 0.6 s late, so nobody may leave before it arrives
    dist.barrier()
    if rank == 0:
        time.sleep(0.6)
    t0 = time.monotonic()
    dist.barrier()
    if rank != 0:
        assert time.monotonic() - t0 > 0.4, "barrier returned before rank 0 arrived"


def _check_dead_peer(rank: int, world: int, how: str) -> None:
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == world - 1:  # the dead peer
        if how == "exit":
            os._exit(0)
        time.sleep(3 * DEAD_PEER_TIMEOUT_S + 30)  # the parent kills it
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000))
    except Exception as e:  # noqa: BLE001 - any error, as long as it comes in time and names the op
        took = time.monotonic() - t0
        print(f"rank {rank}: raised after {took:.1f}s: {type(e).__name__}: {str(e)[:300]}", flush=True)
        assert took < DEAD_PEER_TIMEOUT_S + 10, took
        assert "all_reduce" in str(e), e
        if how == "sleep":
            assert "timeout" in str(e), e
    else:
        raise AssertionError("all_reduce with a dead peer did not raise")
    try:  # the group is unusable now: later ops fail fast
        t0 = time.monotonic()
        dist.barrier()
        raise AssertionError("barrier after a timeout did not raise")
    except RuntimeError as e:
        assert time.monotonic() - t0 < 2, "later op did not fail fast"
        print(f"rank {rank}: later op: {str(e)[:200]}", flush=True)
    os._exit(0)  # skip destroy_process_group and interpreter teardown with a broken group


CHECKS = {"allreduce": _check_allreduce, "alltoall": _check_alltoall, "p2p": _check_p2p,
          "collectives": _check_collectives}
#: the op checks in the order one process group runs them (``ops``: all of them, one after another)
SCENARIOS = tuple(CHECKS)


def _child(scenario: str, rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    import sarlab.kernels.ccl as ccl

    ccl.register()
    timeout = DEAD_PEER_TIMEOUT_S if scenario.startswith("dead") else 60
    dist.init_process_group(
        "ccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=timeout)
    )
    if scenario.startswith("dead_"):
        _check_dead_peer(rank, world, scenario[5:])
    else:
        for name in SCENARIOS if scenario == "ops" else (scenario,):
            CHECKS[name](rank, world)
            dist.barrier()
            print(f"rank {rank}: {name} OK", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: OK", flush=True)


# ------------------------------------------------------------------------------------------- parent side


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def built():
    return require_ccl()  # build once here, not in every child at once


def _spawn(
    scenario: str, world: int, hard_timeout: float = HARD_TIMEOUT_S, wait_for: int | None = None
) -> tuple[list[str], list[int | None], str]:
    """Run the scenario in ``world`` children; return their outputs, exit codes and a report of both.

    Waits for all children (or the first ``wait_for`` ranks, then kills the rest); fails on the hard timeout."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for rank in range(world):
            log = open(os.path.join(tmp, f"rank{rank}.log"), "w+")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, scenario, str(rank), str(world), str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + hard_timeout
        try:
            for p in procs[:wait_for]:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            for p in procs:  # each child leads its own session: kill it and anything it started
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
            log.close()
    report = "\n".join(
        f"--- rank {r} (exit {p.returncode}) ---\n{out[-6000:]}" for r, (p, out) in enumerate(zip(procs, outputs))
    )
    if timed_out:
        pytest.fail(f"{scenario} on {world} ranks: killed after the hard timeout of {hard_timeout}s\n{report}")
    return outputs, [p.returncode for p in procs], report


@pytest.fixture(scope="module")
def ops_run(built):
    """``world`` -> the outputs, exit codes and report of one run of every op check (:data:`SCENARIOS`, in order, in
    one process group of ``world`` children): started once per world size, by its first test. Three fresh
    interpreters per scenario cost ~10 s of CPU, most of it starting up."""
    runs: dict[int, tuple | BaseException] = {}

    def run(world: int):
        if world not in runs:
            try:
                runs[world] = _spawn("ops", world)
            except pytest.fail.Exception as failed:  # the hard timeout: once, not again in every test
                runs[world] = failed
        if isinstance(runs[world], BaseException):
            raise runs[world]
        return runs[world]

    return run


@pytest.mark.parametrize("world", [pytest.param(2, marks=pytest.mark.slow), 3])  # 2 ranks with -m slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ops(ops_run, scenario, world):
    """Each op check passed on every rank (its own line), and the run of all of them ended cleanly."""
    outputs, codes, report = ops_run(world)
    assert all(f"rank {r}: {scenario} OK" in out for r, out in enumerate(outputs)), report
    assert codes == [0] * world, report
    assert all(f"rank {r}: OK" in out for r, out in enumerate(outputs)), report


@pytest.mark.parametrize("how", ["sleep", "exit"])
def test_dead_peer_raises_within_timeout(built, how):
    t0 = time.monotonic()
    outputs, codes, report = _spawn(f"dead_{how}", 2, hard_timeout=DEAD_PEER_TIMEOUT_S + 60, wait_for=1)
    assert codes[0] == 0, report
    assert "raised after" in outputs[0], report
    assert time.monotonic() - t0 < DEAD_PEER_TIMEOUT_S + 60


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
