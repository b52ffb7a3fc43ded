"""The ``sarlab`` command line: one module per command, each with ``build_parser()`` and ``main(argv)``.

This module only names the commands and hands the arguments to the one asked for, turning the errors a
user can cause into one line on stderr. It imports the standard library only, and a command's module when it
runs: importing the engine takes 2.5 s here (torch, PyG) and the reproduce/bench modules 3.6 s (plus SimPy,
matplotlib), which ``sarlab --help`` and the lighter commands need not pay.
"""
from __future__ import annotations

import importlib
import os
import sys

#: command -> (module with ``main(argv)``, attribute, one line of help)
COMMANDS = {
    "partition": ("sarlab.real.commands.partition_cmd", "main", "partition a graph into parts on disk"),
    "train": ("sarlab.real.commands.train_cmd", "main", "train on N local workers (or as one rank under torchrun)"),
    "verify": ("sarlab.real.commands.verify", "main", "compare distributed outputs/gradients with a PyG reference"),
    "bench": ("sarlab.real.commands.cli", "bench_main", "benchmarks: engine, kernels, strategies, network "
                                                            "(`sarlab bench`)"),
    "calibrate": ("sarlab.real.commands.calibrate_cmd", "calibrate_main", "measure this machine's cost profile for "
                                                                             "the simulator"),
    "simulate": ("sarlab.real.commands.simulate_cmd", "simulate_main", "predict epoch time and peak memory (SimPy "
                                                                           "model)"),
    "plan": ("sarlab.real.commands.plan_cmd", "main", "cheapest / fastest / best-value strategy, workers and "
                                                          "resource (simulated)"),
    "reproduce": ("sarlab.real.reproduce.reproduce", "main", "regenerate the paper's figures (measured here or "
                                                                 "simulated, labelled)"),
    "profile": ("sarlab.real.profile.command", "main", "memray per rank: flamegraphs, peak summaries, mode "
                                                           "comparison"),
    "netbench": ("sarlab.real.bench.netbench", "main", "measure the links of an emulated cluster network (--net "
                                                           "veth:...)"),
    "demo": ("sarlab.real.commands.demo", "main", "memory per worker as workers are added (sar, oneshot)"),
    "build-kernels": ("sarlab.kernels.build", "main", "compile the C++ kernels now (else the first run builds them "
                                                      "in the background)"),
}
#: options every command takes, before or after its name: -q (warnings only), -v (debug lines too)
VERBOSITY_FLAGS = {"-q": -1, "--quiet": -1, "-v": 1, "--verbose": 1}
COMMON_HELP = ("common options (any command, before or after its name):\n"
               "  -q, --quiet    warnings and results only (no progress lines)\n"
               "  -v, --verbose  debug lines too")
BENCHES = {"engine": "sarlab.real.bench.bench", "kernels": "sarlab.real.bench.kernel_bench",
           "strategies": "sarlab.real.bench.head_to_head", "network": "sarlab.real.bench.network_scaling"}
# A/B drivers against another checkout and measuring campaigns live outside the package: benchmarks/README.md


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: sarlab COMMAND [options]   (sarlab COMMAND --help; sarlab --version)", "",
             "Distributed full-batch GNN training with Sequential Aggregation and Rematerialization (SAR).", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join([*lines, "", COMMON_HELP])


def split_verbosity(argv: list[str]) -> tuple[int, list[str]]:
    """(verbosity, the other arguments): -q/--quiet and -v/--verbose taken out wherever they stand (before ``--``);
    the last one given wins."""
    verbosity, rest = 0, []
    for i, arg in enumerate(argv):
        if arg == "--":
            return verbosity, rest + argv[i:]
        if arg in VERBOSITY_FLAGS:
            verbosity = VERBOSITY_FLAGS[arg]
        else:
            rest.append(arg)
    return verbosity, rest


def bench_main(argv: list[str]) -> int:
    """``sarlab bench engine|kernels|strategies|network ...``."""
    if not argv or argv[0] not in BENCHES:
        print(f"usage: sarlab bench {{{','.join(BENCHES)}}} [options]  (sarlab bench engine --help)")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:])


def main(argv: list[str] | None = None) -> int:
    """``sarlab COMMAND ...``: from the ``sarlab`` script (``argv`` None), or in-process with ``argv``. The script
    whose reader has gone (``sarlab simulate --help | head``) stops quietly with 141, as a shell's tools do on
    SIGPIPE, instead of a traceback."""
    if argv is not None:
        return _main(argv, script=False)
    try:
        return _main(sys.argv[1:], script=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # interpreter exit flushes nothing more
        return 141


def _main(argv: list[str], script: bool) -> int:
    verbosity, argv = split_verbosity(list(argv))
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from sarlab.version import version_string  # the standard library only: no torch for --version

        print(f"sarlab {version_string()}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"sarlab: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    from sarlab.common import log

    before = os.environ.get(log.ENV_VAR)
    log.configure(verbosity)
    try:
        return _run_command(argv, script)
    finally:  # an in-process caller (tests, a notebook) keeps the verbosity it had
        if before is None:
            os.environ.pop(log.ENV_VAR, None)
        else:
            os.environ[log.ENV_VAR] = before


def _run_command(argv: list[str], script: bool = False) -> int:
    """Run ``argv[0]``'s command on the rest, turning the errors a user can cause into one line on stderr; from the
    ``sarlab`` script, a command that will start workers starts their zygote first (a caller in its own process
    gets one at its first launch, kept for the next)."""
    module, attribute, _ = COMMANDS[argv[0]]
    if script and _launches_workers(argv):  # the zygote imports the engine for the workers while we import it too
        from sarlab.common.paths import package_parent
        from sarlab.real.launch import zygote

        zygote.prestart(str(package_parent()))
    command = getattr(importlib.import_module(module), attribute)
    if "-h" in argv[1:] or "--help" in argv[1:]:
        try:
            return command(argv[1:])
        except SystemExit as done:  # argparse printed the command's help: add the options every command takes
            print(f"\n{COMMON_HELP}")
            raise done
    from sarlab.data.partition import PartitionError  # the errors a user can cause (the engine is loaded by now)
    from sarlab.data.validate_data import InputError
    from sarlab.real.launch.launcher import LaunchError, WorkerError
    from sarlab.real.launch.lifecycle import forced_runs_guarded, interruptible

    try:
        _check_json_option(argv[1:])
        with forced_runs_guarded():  # a run forced past the size check and killed for memory: one line too
            return interruptible(command)(argv[1:])  # HUP/INT/TERM: clean-up, one line, exit 128 + n
    except InputError as err:  # bad data or arguments: one line, exit 2 (as argparse does)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (PartitionError, LaunchError, WorkerError, ValueError, RuntimeError, FileNotFoundError,
            ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except MemoryError as err:  # only with --force past the size check
        print(f"error: out of memory ({err or 'an allocation failed'}); the size check's estimate was right: use "
              "a smaller graph, model or fewer workers", file=sys.stderr)
        return 1
    except OSError as err:  # a disk filled or a device failed during the run (its outputs were checked before)
        print(f"error: {err.strerror or err}{f': {err.filename}' if err.filename else ''}", file=sys.stderr)
        return 1


#: commands that start local workers (their zygote is started first: :mod:`sarlab.real.launch.zygote`)
LAUNCHING = ("train", "verify", "demo", "bench", "reproduce", "profile")


def _launches_workers(argv: list[str]) -> bool:
    """Whether ``argv`` will start local workers on loopback (not help, not as one rank under torchrun or another
    env:// launcher, not on an emulated network, whose workers start inside its namespaces)."""
    from sarlab.common.machine import under_torchrun

    return (argv[0] in LAUNCHING and not {"-h", "--help"} & set(argv[1:]) and "TORCHELASTIC_RUN_ID" not in os.environ
            and not under_torchrun() and not any("veth" in a for a in argv[1:]))


def _check_json_option(args: list[str]) -> None:
    """Every command's ``--json PATH`` is a path a file system can hold, not a directory or a link, in a writable
    folder (before any work; each command also refuses to replace an existing file it did not write without
    ``--force``: :func:`sarlab.real.launch.outputs.check_file`)."""
    from sarlab.real.launch import outputs

    for i, arg in enumerate(args):
        path = args[i + 1] if arg == "--json" and i + 1 < len(args) else arg[7:] if arg.startswith("--json=") else None
        if path:
            outputs.check_file(path, "--json", force=True)


if __name__ == "__main__":
    sys.exit(main())
