"""``sarlab calibrate``: measure this machine (micro-benchmarks and real engine epochs) into the profile JSON that
``sarlab simulate`` reads; ``--backend ccl`` adds a backend's overlay to a calibrated profile."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sarlab.real.calibration.calibrate import Calibration, calibrate, calibrate_backend
from sarlab.real.commands.show import say, warn, write_json_file
from sarlab.real.launch import outputs
from sarlab.simulator.hardware.backends import BASE_BACKEND, overlay_to_json
from sarlab.simulator.hardware.profile import Profile, save_profile
from sarlab.simulator.hardware.provenance import LOCAL_PROFILE

#: exit status of ``sarlab calibrate`` when it refused an implausible calibration
REJECTED = 3


def calibrate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sarlab calibrate",
        description="Measure this machine (GEMM, sparse/max aggregation, GAT attention, elementwise bandwidth, "
        "gloo point-to-point between 2 local processes, allocator, real engine epochs) and write the profile "
        "JSON that `sarlab simulate` reads.",
    )
    p.add_argument("--out", default=str(LOCAL_PROFILE),
                   help="profile JSON to write (default: %(default)s, in sarlab's cache, which `sarlab simulate` uses "
                   "by default and every calibration replaces; another existing file needs --force)")
    p.add_argument("--quick", action="store_true",
                   help="small shapes, few repeats, no co-location: about 20 s on a quiet 2-core machine (a full "
                   "calibration: about 2.5 min on one core, 3 on two); a check that calibrating works here, "
                   "not a profile to predict runs with (its compute scale comes from two tiny graphs); it says at its "
                   "start what its steps should take here, and warns, with the load it sees, when the machine is "
                   "busy (minutes then)")
    p.add_argument("--no-network", action="store_true", help="skip the gloo benchmark (assume 50 us, 1 GB/s)")
    p.add_argument("--no-fused", action="store_true", help="skip the fused GAT kernels")
    p.add_argument("--no-engine", action="store_true",
                   help="do not fit compute_scale from real engine epochs (microbenchmarks alone)")
    p.add_argument("--scale-key", choices=("peak", "activation"), default="peak",
                   help="key the compute scale curve by each worker's predicted peak memory (default) or by its "
                   "activation bytes (nodes x widest layer)")
    p.add_argument("--threads", type=int, default=None, help="threads for the all-cores measurement")
    p.add_argument("--quiet-tries", type=int, default=3,
                   help="repeat a timing step up to this many times while other processes disturb it "
                   "(default: %(default)s)")
    p.add_argument("--accept-implausible", action="store_true",
                   help="write the profile to --out even when its thread efficiencies are implausible for the "
                   "core count (it is flagged in its notes and meta either way)")
    p.add_argument("--name", default="local", help="profile name (default: %(default)s)")
    p.add_argument("--backend", default=BASE_BACKEND, choices=("gloo", "ccl"),
                   help="gloo (default): the whole calibration, its links and message costs over gloo; ccl: only the "
                   "links, message costs and progress spread, measured over oneCCL and added to the existing profile "
                   "at --out as its backends.ccl overlay (nothing else in it changes; `sarlab simulate --backend ccl` "
                   "prices with it)")
    p.add_argument("--json", metavar="PATH", help="also write a machine-readable summary here")
    p.add_argument("--force", action="store_true",
                   help="replace --out, its .rejected.json companion or --json when they exist and this command did "
                   "not write them (files in sarlab's cache, the default --out among them, are replaced without it)")
    return p


def check_outputs(args: argparse.Namespace) -> None:
    """``--out`` (and its ``.rejected.json`` companion) and ``--json``, before anything is measured: one
    :class:`~sarlab.real.launch.outputs.OutputError` naming the option and the path. ``--backend NAME`` edits the
    profile at ``--out`` in place, so that file must be one it can replace."""
    if args.backend == BASE_BACKEND:
        outputs.check_file(args.out, "--out", args.force, suffixes=(".json",))
        out = Path(args.out)
        outputs.check_file(out.with_name(out.stem + ".rejected.json"), f"--out {args.out!r}: its companion",
                           args.force)
    else:
        outputs.check_file(args.out, "--out", force=True, suffixes=(".json",))  # a profile this command edits
    if args.json:
        outputs.check_file(args.json, "--json", args.force)


def add_backend_overlay(path: Path, backend: str, overlay: dict[str, Any]) -> Path:
    """Write ``overlay`` as ``backends[backend]`` of the profile JSON at ``path``, leaving every other key as it is
    (the file is edited as JSON, so that keys this version does not read survive too)."""
    data = json.loads(path.read_text())
    data.setdefault("backends", {})[backend] = overlay_to_json(overlay)
    Profile.from_json(json.loads(json.dumps(data)))  # it must still load
    outputs.write_bytes(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _calibrate_backend(args: argparse.Namespace, cal: Calibration, argv: list[str] | None) -> int:
    """``sarlab calibrate --backend NAME``: the backend's links and message costs into the profile at ``--out``."""
    out = Path(args.out)
    if not out.exists():
        print(f"error: {out} does not exist: `sarlab calibrate --backend {args.backend}` adds the {args.backend} "
              f"overlay to a calibrated profile; run `sarlab calibrate --out {out}` first", file=sys.stderr)
        return 2
    try:
        Profile.from_json(json.loads(out.read_text()))
    except (ValueError, KeyError, TypeError) as err:
        print(f"error: {out} is not a profile this version reads ({err})", file=sys.stderr)
        return 2
    command = "sarlab calibrate " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        overlay = calibrate_backend(cal, args.backend, command=command.strip())
    except (RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    add_backend_overlay(out, args.backend, overlay)
    link = overlay["intra_host"]
    say(f"{args.backend}: alpha {link.alpha_s * 1e6:.1f} us (gap {link.gap_s * 1e6:.1f} us), bandwidth "
           f"{link.bandwidth_Bps / 1e9:.2f} GB/s; exchange call {overlay['p2p_call_s'] * 1e6:.1f} us + "
           f"{overlay['p2p_op_s'] * 1e6:.1f} us per op posted, {overlay['p2p_wait_s'] * 1e6:.1f} us per op waited, "
           f"{overlay['p2p_msg_cpu_s'] * 1e6:.1f} us background CPU per op")
    crowded = overlay.get("crowded_cpu", {})
    if crowded:
        say(f"{args.backend} on hosts with more ranks than cores: "
               f"{crowded.get('p2p_msg_cpu_s', overlay['p2p_msg_cpu_s']) * 1e6:.1f} us background CPU per op, "
               f"{crowded.get('p2p_cpu_s_per_byte', overlay['p2p_cpu_s_per_byte']) * 1e9:.3f} s/GB moved "
               f"(else {overlay['p2p_cpu_s_per_byte'] * 1e9:.3f})")
    say(f"wrote backends.{args.backend} into {out}")
    if args.json:
        write_json_file(args.json, {"profile_path": str(out), "backend": args.backend,
                                    "overlay": overlay_to_json(overlay)})
    return 0


def calibrate_main(argv: list[str] | None = None) -> int:
    """``sarlab calibrate``: microbenchmarks -> profile JSON. Returns the exit status (:data:`REJECTED` when
    the calibration is implausible and not accepted; it is then written beside ``--out`` as
    ``<stem>.rejected.json``)."""
    args = calibrate_parser().parse_args(argv)
    check_outputs(args)  # before anything is measured
    cal = Calibration(
        quick=args.quick,
        network=not args.no_network,
        fused=not args.no_fused,
        engine=not args.no_engine,
        scale_key=args.scale_key,
        threads=args.threads,
        quiet_tries=1 if args.quick else args.quiet_tries,
        log=say,
    )
    if args.backend != BASE_BACKEND:
        return _calibrate_backend(args, cal, argv)
    profile = calibrate(cal, name=args.name)
    implausible = profile.meta.get("implausible", [])
    out = Path(args.out)
    if implausible and not args.accept_implausible:
        out = out.with_name(out.stem + ".rejected.json")
        for line in implausible:
            print(f"error: implausible calibration, {line}", file=sys.stderr)
        print(f"error: not written to {args.out}: the thread efficiencies cannot be what {profile.cores_per_host} "
              "cores deliver (other processes on the cores? SMT siblings?); calibrate again on a quiet machine, or "
              f"pass --accept-implausible; the measured profile is in {out}", file=sys.stderr)  # fmt: skip
    for line in profile.meta.get("compute_scale_flag", []):
        warn(f"{line} (written all the same: the scale absorbs it, but applies it to every op family)")
    with outputs.staged_file(out) as tmp:  # written whole or not at all
        save_profile(profile, tmp)
    path = out
    say(f"wrote {path}")
    if args.json:
        write_json_file(args.json, {"profile_path": str(path), "profile": profile.to_json(),
                                    "implausible": implausible})
    return REJECTED if implausible and not args.accept_implausible else 0
