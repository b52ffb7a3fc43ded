"""Medians and ranges, old vs new, of the A/B runs in this folder (seconds and fitted values)."""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent


def rows(pattern):
    return [r for f in sorted(HERE.glob(pattern)) for r in json.load(open(f))]


def line(name, old, new, fmt="{:.3g}"):
    def cell(v):
        return (f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}-{fmt.format(max(v))}] n={len(v)}"
                if v else "-")
    print(f"| {name} | {cell(old)} | {cell(new)} |")


def split(rs, key):
    return ([key(r) for r in rs if r["variant"] == "old" and key(r) is not None],
            [key(r) for r in rs if r["variant"] == "new" and key(r) is not None])


print("| value | old: median [range] | new: median [range] |\n|---|---|---|")
share = rows("ab_share_[234].json")  # the final code's runs (ab_share_1: single timed warm-up call)
line("co-location seconds", *split(share, lambda r: r["s"]))
for fam in ("gemm", "spmm", "max_aggr", "gat_autograd", "gat_unfused", "gat_fused", "elementwise"):
    line(f"eta {fam}", *split(share, lambda r, f=fam: r["eta"].get(f)), fmt="{:.2f}")
msg = rows("ab_msg_*.json") + [dict(r, s=r["messages_s"]) for r in rows("ab_net.json")]
line("message costs seconds", *split(msg, lambda r: r["s"]))
for k in ("p2p_call_s", "p2p_op_s", "p2p_wait_s", "p2p_msg_cpu_s"):
    line(f"{k} (us)", *split(msg, lambda r, k=k: r["fit"][k] * 1e6), fmt="{:.1f}")
prog = rows("ab_prog_*.json") + [dict(r, s=r["progress_s"]) for r in rows("ab_net.json")]
line("progress spread seconds", *split(prog, lambda r: r["s"]))
for p in ("2", "4", "8"):
    line(f"sigma_P P={p}", *split(prog, lambda r, p=p: r["sigma"][p]), fmt="{:.3f}")
