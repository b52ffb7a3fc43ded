"""Running a memory profile: train once per mode with memray in every worker, then read and render each capture.

Every worker runs under ``memray.Tracker`` (``Job.memray_dir``) from after set-up to the end of training and
writes ``<out>/<mode>/rank{r}.bin``; :mod:`sarlab.real.profile.attribution` reads each capture at its peak and
:mod:`sarlab.real.profile.report` writes the summaries, flamegraphs and the combined report.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

from sarlab.core.config import MODES, EngineConfig
from sarlab.nn.model import ModelConfig
from sarlab.real.launch import outputs
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.real.launch.netspec import NetSpec
from sarlab.real.profile.attribution import RankProfile, analyze_capture
from sarlab.real.profile.report import (
    ProfileResult,
    fmt_bytes,
    largest,
    rank_summary_markdown,
    write_flamegraph,
    write_report,
    write_text,
)
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)


def vmhwm_by_rank(records: list[dict]) -> dict[int, int]:
    """Max over a rank's epochs of its resident high-water mark above the post-set-up RSS."""
    out: dict[int, int] = {}
    for record in records:
        above = int(record["peak_mem_bytes"]) - int(record["baseline_mem_bytes"])
        out[record["rank"]] = max(out.get(record["rank"], above), above)
    return out


def run_profile(partition_dir: str, workers: int, modes: Sequence[str], model: ModelConfig, train: TrainConfig,
                engine: EngineConfig, out_dir: str, backend: str = "gloo", timeout_s: float = 60.0,
                port: int = 0, top: int = 10, flamegraphs: bool = True, settings: dict | None = None,
                progress: Callable[[str], None] = _log.info, net: NetSpec | None = None) -> ProfileResult:
    """Train once per mode with memray in every worker, then analyse each capture and write the report.

    Writes ``out_dir/<mode>/rank{r}.bin``, ``rank{r}_flamegraph.html``, ``rank{r}_summary.md`` and
    ``out_dir/report.md`` / ``report.html`` (with two figures).

    Args:
        partition_dir: partition with ``workers`` parts.
        workers: local worker processes.
        modes: aggregation modes to profile, one training run each (``engine.mode`` is replaced by each).
        model: model architecture.
        train: optimisation settings (``epochs`` per mode).
        engine: engine settings.
        out_dir: output directory (created).
        backend, timeout_s, port: launch settings; ``net`` the network the workers talk over (default loopback).
        top: allocation sites kept per rank.
        flamegraphs: also write memray's HTML flamegraph per rank.
        settings: extra settings recorded in the report and the JSON (e.g. ``graph``).
        progress: called with one line per step.
    """
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"unknown mode(s) {unknown or modes}: choose from {', '.join(MODES)}")
    os.makedirs(out_dir, exist_ok=True)
    profiles: list[RankProfile] = []
    for mode in modes:
        mode_dir = os.path.abspath(os.path.join(out_dir, mode))
        os.makedirs(mode_dir, exist_ok=True)
        job = Job("train", partition_dir, model, train, replace(engine, mode=mode), backend=backend,
                  timeout_s=timeout_s, quiet=True, label=f"profile-{mode}", memray_dir=mode_dir)
        progress(f"[{mode}] training {train.epochs} epoch(s) on {workers} workers with memray in every rank")
        started = time.perf_counter()
        records = launch(job, workers, port=port, net=net, log=progress)
        progress(f"[{mode}] training done in {time.perf_counter() - started:.1f}s; analysing captures")
        vmhwm = vmhwm_by_rank(records)
        for rank in range(workers):
            capture = os.path.join(mode_dir, f"rank{rank}.bin")
            prof = analyze_capture(capture, mode, rank, top)
            prof.vmhwm_bytes = vmhwm.get(rank)
            if flamegraphs:
                prof.flamegraph = os.path.join(mode_dir, f"rank{rank}_flamegraph.html")
                with outputs.staged_file(prof.flamegraph) as html:  # whole or not at all
                    write_flamegraph(capture, html)
            prof.summary = os.path.join(mode_dir, f"rank{rank}_summary.md")
            write_text(prof.summary, rank_summary_markdown(prof))
            progress(f"[{mode}] rank {rank}: memray peak {fmt_bytes(prof.peak_bytes)}, VmHWM - baseline "
                     f"{fmt_bytes(prof.vmhwm_bytes)}; largest share: {largest(prof)}")
            profiles.append(prof)
    settings = dict(settings or {})
    settings.setdefault("partition_dir", os.path.abspath(partition_dir))
    settings.update(workers=workers, net=str(net or NetSpec()), modes=list(modes), model=asdict(model),
                    train=asdict(train), engine={k: v for k, v in asdict(engine).items() if k != "mode"})
    result = ProfileResult(settings, profiles)
    write_report(result, out_dir)
    progress(f"report: {result.report_md}")
    return result
