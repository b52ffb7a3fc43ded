"""Print one training step of a worker's trace (written by ``sitecustomize.py``): every wrapped engine call with the
live tensor bytes at its entry and exit and the peak before and after it, in MiB above the step's start.

    python levels.py /tmp/h19_trace_<pid>.json STEP
"""
import json
import sys


def main() -> None:
    calls = json.load(open(sys.argv[1]))
    steps = [i for i, call in enumerate(calls) if call["name"] == "trainer.step"]
    step = int(sys.argv[2])
    first = steps[step]
    last = steps[step + 1] if step + 1 < len(steps) else len(calls)
    base = calls[first]["live0"]
    for j, call in enumerate(calls[first:last]):
        mib = {k: (call[k] - base) / 2**20 if k in call else float("nan") for k in ("live0", "live1", "peak0", "peak1")}
        print(f"{j:4d} {'  ' * call['depth']}{call['name']:16s} live0 {mib['live0']:7.2f} live1 {mib['live1']:7.2f} "
              f"peak0 {mib['peak0']:7.2f} -> {mib['peak1']:7.2f} {call['shapes']}")


if __name__ == "__main__":
    main()
