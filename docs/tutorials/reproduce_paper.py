"""Reproduce the SAR paper's figures 5 and 6 (ogbn-papers100M at N = 32 and 64), smoke-sized, and read them.

Tutorial: docs/tutorials/reproduce_paper.rst. About 15 s on 2 cores; writes only under a temporary folder.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

out = Path(tempfile.mkdtemp(prefix="sarlab-reproduce-"))

# 1. The command a user types: `sarlab reproduce --quick --only fig5_fig6 --out DIR` (python -m sarlab = sarlab).
subprocess.run([sys.executable, "-m", "sarlab", "reproduce", "--quick", "--only", "fig5_fig6", "--out", str(out)],
               check=True)
print(sorted(p.name for p in out.iterdir()))

# 2. What ran and how: the step's manifest says, per figure, measured or simulated, with which parameters.
manifest = json.loads((out / "reproduce_fig5_fig6.json").read_text())
for unit, entry in manifest["units"].items():
    print(f"{unit}: {entry['kind']} ({manifest['run']} run), profile {entry['provenance']['profile']}, "
          f"N = {entry['params']['workers']}")

# 3. The numbers behind figure 5 (3-layer GraphSAGE): one row per (series, N), every one SIMULATED.
fig5 = pd.read_csv(out / "fig5_sage_ogbn-papers100M_simulated.csv")
fig5["peak_GiB"] = fig5.peak_mem_bytes / 2**30
print(fig5[["kind", "series", "workers", "epoch_time_s", "peak_GiB", "mem_scaling", "oom"]].round(2)
      .to_string(index=False))

sar = fig5[fig5["mode"] == "sar"].set_index("workers")
oneshot = fig5[fig5["mode"] == "oneshot"].set_index("workers")
assert (fig5["kind"] == "simulated").all()
assert (sar.peak_mem_bytes < oneshot.peak_mem_bytes).all(), "SAR should need less memory than oneshot"
print(f"at N = {sar.index[0]}: SAR {sar.peak_GiB.iloc[0]:.0f} GiB per worker, "
      f"oneshot {oneshot.peak_GiB.iloc[0]:.0f} GiB (predicted on the paper's cluster preset)")
print(f"figures: {out / 'fig5_sage_ogbn-papers100M_simulated.png'}, {out / 'fig6_gat_ogbn-papers100M_simulated.png'}")
