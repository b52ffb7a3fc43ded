"""Every command and snippet in README.md runs.

README's fenced blocks are read in order: ``bash``/``console`` blocks run line by line (backslash continuations
joined, comments dropped) in a temporary working directory: a plain ``sarlab ...`` line in this process
(``cli.main``, what the ``sarlab`` script calls; the installed script is test_packaging.py's), anything else in
bash with the venv's ``bin`` first on PATH; ``python`` blocks run with the venv's python. Paths under
``/tmp/sarlab-example`` are mapped into the test's temporary directory and ``SARLAB_CACHE_DIR`` points there too
(the C++ kernels stay where this checkout built them).

Not run: the first block (``make run`` / ``make test``: the suite would run itself) and blocks that README marks
visibly with ``<!-- not run: REASON -->`` on the line before the fence; of those, every ``sarlab`` command must
answer ``--help`` (asked in this process), every ``make``
target must exist (``make -n``) and every ``pip install`` extra must be declared by the installed package
(pyproject.toml). Blocks in other languages (``text``) are not code.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import metadata

import pytest
from conftest import cli_here

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BIN = os.path.dirname(sys.executable)
EXAMPLE_DIR = "/tmp/sarlab-example"
RUN_LANGS = ("bash", "console", "python")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")


@dataclass
class Block:
    lang: str
    line: int  # 1-based line of the opening fence
    lines: list[tuple[int, str]]  # (1-based line, text)
    not_run: str | None  # the reason given in README, or None


def read_blocks(path: str = README) -> list[Block]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read().splitlines()
    blocks, i = [], 0
    while i < len(text):
        m = re.match(r"^```(\w*)\s*$", text[i])
        if not m:
            i += 1
            continue
        start, lang, body = i, m.group(1), []
        i += 1
        while i < len(text) and not text[i].startswith("```"):
            body.append((i + 1, text[i]))
            i += 1
        before = next((text[j] for j in range(start - 1, -1, -1) if text[j].strip()), "")
        reason = NOT_RUN.search(before)
        blocks.append(Block(lang, start + 1, body, reason.group(1) if reason else None))
        i += 1
    return blocks


def commands(block: Block) -> list[tuple[int, str]]:
    """Shell commands of a block: continuations joined, ``$`` prompts and comments dropped, with their line."""
    out, pending, first = [], "", 0
    for number, raw in block.lines:
        text = raw.rstrip()
        if block.lang == "console":
            if not (text.startswith("$ ") or pending):
                continue  # console output
            text = text[2:] if text.startswith("$ ") and not pending else text
        if not pending:
            first = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        full = (pending + text).strip()
        pending = ""
        words = shlex.split(full, comments=True)
        if words:
            out.append((first, shlex.join(words)))
    return out


def _env(tmp) -> dict:
    from sarlab.kernels import build_dir

    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["SARLAB_CACHE_DIR"] = str(tmp / "cache")
    env["SARLAB_KERNEL_BUILD_DIR"] = str(build_dir())  # the kernels this checkout built, not a fresh compile
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _local(text: str, tmp) -> str:
    return text.replace(EXAMPLE_DIR, str(tmp / "example"))


def _sarlab_words(command: str) -> list[str] | None:
    """The arguments of a plain ``sarlab ...`` command line (no pipes, redirections, variables or globs), else None."""
    if re.search(r"[|&;<>$`*?(){}]", command):
        return None
    words = shlex.split(command)
    return words[1:] if words and words[0] == "sarlab" else None


def _run(argv: list[str] | str, where: str, tmp, timeout: float, shell: bool = False, cwd: str | None = None):
    """Run a README line. A plain ``sarlab ...`` line runs in this process (``cli.main``, what the ``sarlab`` script
    calls: the script itself is tested installed, by test_packaging.py) with the block's environment and working
    directory; anything else in a shell or an interpreter of its own."""
    words = _sarlab_words(argv) if shell else None
    if words is not None:
        keep = ("SARLAB_CACHE_DIR", "SARLAB_KERNEL_BUILD_DIR")
        env = _env(tmp)
        proc = cli_here(words, env={k: env[k] for k in keep}, cwd=cwd or str(tmp / "work"))
    else:
        try:
            proc = subprocess.run(argv, shell=shell, capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd or str(tmp / "work"), env=_env(tmp),
                                  executable="/bin/bash" if shell else None)
        except subprocess.TimeoutExpired as err:
            pytest.fail(f"{where} did not finish in {timeout:.0f} s\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"{where} failed (exit {proc.returncode})\nstdout:\n{proc.stdout[-4000:]}\n"
                    f"stderr:\n{proc.stderr[-4000:]}")
    return proc


BLOCKS = read_blocks()


def test_readme_starts_with_make_run_and_make_test():
    with open(README, encoding="utf-8") as fh:
        lines = [line for line in fh.read().splitlines() if line.strip()]
    assert lines[0].startswith("# "), "README starts with its title"
    first = BLOCKS[0]
    assert first.line == 3 and lines[1] == "```bash", "the first thing after the title is the make block"
    assert [shlex.split(text, comments=True) for _, text in first.lines] == [["make", "run"], ["make", "test"]]
    assert all("#" in text for _, text in first.lines), "each of make run / make test says what it does"


def test_examples_stay_in_the_example_folder():
    """README's examples write only under /tmp/sarlab-example (mapped into the test's tmp) and cite no machine."""
    with open(README, encoding="utf-8") as fh:
        text = fh.read()
    assert "../shared" not in text and "/work/" not in text and "real.run" not in text and "-m real" not in text
    for block in BLOCKS:
        for number, line in block.lines:
            for path in re.findall(r"/tmp/[\w.-]*", line):
                assert path == EXAMPLE_DIR, f"README.md:{number}: {path} is outside {EXAMPLE_DIR}"


RUN = [b for b in BLOCKS[1:] if b.lang in RUN_LANGS and b.not_run is None]
SKIPPED = [b for b in BLOCKS[1:] if b.lang in RUN_LANGS and b.not_run is not None]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One temporary folder for all runnable blocks: later blocks use what earlier ones wrote."""
    tmp = tmp_path_factory.mktemp("readme")
    (tmp / "work").mkdir()
    return tmp


def test_readme_has_runnable_examples():
    assert RUN, "README has no runnable example"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", RUN, ids=[f"line{b.line}-{b.lang}" for b in RUN])
def test_readme_block_runs(block, workdir):
    """Each runnable block, in README's order; a failure names the block, the command and its line."""
    if block.lang == "python":
        script = workdir / f"readme_block_{block.line}.py"
        script.write_text(_local("\n".join(text for _, text in block.lines) + "\n", workdir))
        _run([sys.executable, str(script)], f"README.md python block at line {block.line}", workdir, 400)
        return
    for number, command in commands(block):
        _run(_local(command, workdir), f"README.md line {number} (block at line {block.line}): `{command}`",
             workdir, 400, shell=True)


def _check_not_run(command: str, where: str, tmp) -> None:
    words = shlex.split(command)
    if words[0] == "sudo":
        words = words[1:]
    if words[0] == "torchrun":
        assert "-m" in words and words[words.index("-m") + 1] == "sarlab", f"{where}: torchrun of what?"
        words = ["sarlab", *words[words.index("-m") + 2:]]
    if words[0] == "sarlab":  # in this process (cli.main, what the script calls): README's own runs start the script
        sub = [w for w in words[1:3] if not w.startswith("-")][:2 if words[1:2] == ["bench"] else 1]
        res = cli_here([*sub, "--help"])
        shown = f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        assert res.returncode == 0 and "usage:" in res.stdout, \
            f"{where}: `sarlab {' '.join(sub)} --help` exited {res.returncode}\n{shown}"
    elif words[0] == "make":
        _run(["make", "-n", *words[1:]], f"{where}: `make -n {' '.join(words[1:])}`", tmp, 60, cwd=ROOT)
    elif words[:2] == ["pip", "install"]:
        extras = set(metadata("sarlab").get_all("Provides-Extra") or [])
        for target in words[2:]:
            m = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
            assert m, f"{where}: installs {target!r}, not this package"
            for extra in (m.group(1) or "").split(","):
                assert not extra or extra in extras, f"{where}: extra [{extra}] is not in pyproject.toml"
    else:
        pytest.fail(f"{where}: no check for `{command}`; run it, or teach tests/test_readme.py to check it")


@pytest.mark.timeout(300)
def test_not_run_examples_are_checked(tmp_path):
    (tmp_path / "work").mkdir()
    for block in SKIPPED:
        assert block.not_run, f"README.md:{block.line}: a not-run block says why"
        for number, command in commands(block):
            _check_not_run(command, f"README.md line {number} (not run: {block.not_run})", tmp_path)
