"""Old vs new shard SpMM tail, side by side: ``out += A x`` on a random 0/1 CSR, one thread, float32.

The old kernel is ``kernels/csrc/spmm.cpp`` at ``--old`` (git), the new one the working tree's; each is built
as its own torch cpp_extension (a two-line binding of ``spmm_csr`` only, the package's flags ``-O3 -fopenmp
-march=native``) under ``--build-dir``. Within a round each (graph, F) calls the two kernels in turn ``--reps`` times
(after one untimed call each), rounds alternating which goes first; a round's time is the median of its calls,
new/old is the median over rounds of the round's ratio (old and new ms: medians over rounds). Before
timing, the two outputs are checked to be bitwise equal. F = 16 and 64 have no tail: their ratio is the noise.

    mkdir -p /tmp/q && flock /tmp/q/timing.lock taskset -c 0 .venv/bin/python \\
        results/kernels/spmm_tail/bench_spmm_tail.py --old a1ccf6d
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

REPO = Path(__file__).resolve().parents[3]
BINDING = """#include <torch/csrc/utils/pybind.h>
#include "kernels.h"
PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("spmm_csr", &sarlab_kernels::spmm_csr, pybind11::call_guard<pybind11::gil_scoped_release>());
}
"""


def git_show(rev: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def build(name: str, spmm_source: str, header: str, build_dir: Path):
    """The extension ``name`` from one spmm.cpp text (and the kernels.h it includes), in its own folder."""
    src = build_dir / name
    src.mkdir(parents=True, exist_ok=True)
    for file, text in (("spmm.cpp", spmm_source), ("kernels.h", header), ("bindings.cpp", BINDING)):
        path = src / file
        if not path.exists() or path.read_text() != text:  # keep mtimes (ninja's cache) when nothing changed
            path.write_text(text)
    return load(name=name, sources=[str(src / "bindings.cpp"), str(src / "spmm.cpp")],
                extra_cflags=["-O3", "-fopenmp", "-march=native"], extra_ldflags=["-fopenmp"],
                extra_include_paths=[str(src)], build_directory=str(src), verbose=False)


def random_csr(rows: int, degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` x ``rows`` CSR, every row ``degree`` uniform random sources (sorted within the row)."""
    gen = torch.Generator().manual_seed(seed)
    col = torch.randint(0, rows, (rows, degree), generator=gen).sort(dim=1).values.reshape(-1).contiguous()
    rowptr = torch.arange(rows + 1, dtype=torch.int64) * degree
    return rowptr, col


def time_pair(kernels: dict, order: list[str], rowptr, col, x, out, reps: int) -> dict[str, float]:
    """Median seconds of ``reps`` calls of each kernel, calls interleaved (A B A B ...) after one untimed each."""
    for name in order:
        kernels[name].spmm_csr(rowptr, col, x, out, True)  # warm-up: x, the CSR and out back in cache
    times: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(reps):
        for name in order:
            start = time.perf_counter()
            kernels[name].spmm_csr(rowptr, col, x, out, True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", default="a1ccf6d",
                        help="git revision of the old kernels/csrc/spmm.cpp (a1ccf6d: the last one column at a time)")
    parser.add_argument("--graphs", default="24000:30,60000:20", help="rows:degree,...")
    parser.add_argument("--widths", default="7,8,15,16,40,47,64,100,128")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--old-file", type=Path, help="an spmm.cpp to time as 'old' instead of --old's")
    parser.add_argument("--new-file", type=Path, help="an spmm.cpp to time as 'new' instead of the working tree's")
    parser.add_argument("--control", action="store_true",
                        help="A/A: 'old' is the working tree's spmm.cpp too, built as a second module")
    parser.add_argument("--build-dir", type=Path, default=Path("/tmp/spmm_tail_build"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    old_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.old], check=True,
                             capture_output=True, text=True).stdout.strip()
    new_label = str(args.new_file) if args.new_file else "working tree"
    new_source = (args.new_file or REPO / "kernels/csrc/spmm.cpp").read_text()
    new_header = (REPO / "kernels/csrc/kernels.h").read_text()
    old_source = git_show(args.old, "kernels/csrc/spmm.cpp")
    if old_source == new_source and not args.control:
        print(f"warning: spmm.cpp at {old_rev} equals the working tree's", file=sys.stderr)
    old_header = git_show(args.old, "kernels/csrc/kernels.h")
    if args.control:
        old_rev, old_source, old_header = f"{new_label} (A/A control)", new_source, new_header
    elif args.old_file:
        old_rev, old_source, old_header = str(args.old_file), args.old_file.read_text(), new_header
    old_name = "spmm_tail_control" if args.control else "spmm_tail_file" if args.old_file else "spmm_tail_old"
    kernels = {"old": build(old_name, old_source, old_header, args.build_dir),
               "new": build("spmm_tail_newfile" if args.new_file else "spmm_tail_new", new_source, new_header,
                            args.build_dir)}
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}, affinity {sorted(os.sched_getaffinity(0))}, old = {old_rev}, "
          f"new = {new_label}; rounds {args.rounds}, reps {args.reps}, float32, out += A x", flush=True)
    widths = [int(w) for w in args.widths.split(",")]
    graphs = [tuple(int(v) for v in g.split(":")) for g in args.graphs.split(",")]
    samples: dict[tuple[int, int, int, str], list[float]] = {}
    cases = []
    for rows, degree in graphs:
        rowptr, col = random_csr(rows, degree, seed=rows + degree)
        for width in widths:
            x = torch.randn(rows, width, generator=torch.Generator().manual_seed(width))
            base = torch.randn(rows, width, generator=torch.Generator().manual_seed(width + 1))
            got = {name: ext.spmm_csr(rowptr, col, x, base.clone(), True) for name, ext in kernels.items()}
            assert torch.equal(got["old"], got["new"]), f"old and new differ at rows={rows} F={width}"
            cases.append((rows, degree, width, rowptr, col, x, base.clone()))
    print("# old and new outputs bitwise equal in every case", flush=True)
    for round_ in range(args.rounds):
        order = ["old", "new"] if round_ % 2 == 0 else ["new", "old"]
        for rows, degree, width, rowptr, col, x, out in cases:
            for name, seconds in time_pair(kernels, order, rowptr, col, x, out, args.reps).items():
                samples.setdefault((rows, degree, width, name), []).append(seconds)
        print(f"# round {round_ + 1}/{args.rounds} done", flush=True)
    print("| rows x degree | F | tail columns | old ms | new ms | new/old | per-round new/old, min-max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for rows, degree, width, *_ in cases:
        old, new = samples[(rows, degree, width, "old")], samples[(rows, degree, width, "new")]
        paired = [n / o for n, o in zip(new, old)]
        print(f"| {rows} x {degree} | {width} | {width % 16} | {1e3 * statistics.median(old):.2f} | "
              f"{1e3 * statistics.median(new):.2f} | {statistics.median(paired):.2f} | "
              f"{min(paired):.2f}-{max(paired):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
