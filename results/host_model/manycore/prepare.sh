#!/bin/bash
# Run HERE, before the device call (results/host_model/manycore/README.md): puts into .whl/ at the repository root
# the wheels the many-core machine lacks (simpy and pymetis, cp312 manylinux, the versions this .venv has) and
# sarlab's own wheel built from the working tree as it is now (tracked and untracked-not-ignored files: the tree
# that travels), and makes sure .whl/ is git-ignored (.git/info/exclude) so that only `carry: [".whl"]` takes it.
# Prints every wheel's size, the total, and what travels in all (limit 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
W=$ROOT/.whl

# 1. .whl/ ignored by git (it must not travel as an untracked file, only as the carried path)
EXCL=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCL")"
grep -qx '/.whl/' "$EXCL" 2>/dev/null || echo '/.whl/' >> "$EXCL"
git check-ignore -q .whl/x || { echo "prepare: .whl/ is not ignored by git" >&2; exit 1; }

rm -rf "$W"; mkdir -p "$W"

# 2. simpy and pymetis for the device's Python 3.12, at this .venv's versions. Their Requires-Dist must be on the
#    device already (KINDS.md's package list): pymetis needs typing-extensions only, simpy nothing.
ver() { "$PY" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
SIMPY=$(ver simpy); PYMETIS=$(ver pymetis)
[ -n "$SIMPY" ] && [ -n "$PYMETIS" ] || { echo "prepare: simpy/pymetis not installed in $PY" >&2; exit 1; }
plat=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do plat="$plat --platform $p"; done
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
    -d "$W" "simpy==$SIMPY" "pymetis==$PYMETIS"
DEVICE_HAS=" typing-extensions typing_extensions numpy torch scipy pandas matplotlib ninja cloudpickle "
for f in "$W"/simpy-*.whl "$W"/pymetis-*.whl; do
  reqs=$(unzip -p "$f" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' || true)
  echo "prepare: $(basename "$f") requires: ${reqs:-nothing}"
  while read -r r; do
    [ -z "$r" ] && continue
    name=$(echo "$r" | sed 's/[ ;<>=!~(\[].*//' | tr 'A-Z' 'a-z')
    case "$DEVICE_HAS" in *" $name "*) ;; *) echo "prepare: WARNING $name is not known to be on the device" >&2;; esac
  done <<< "$reqs"
done

# 3. sarlab's wheel from a clean copy of the tree that travels (a stale build/ at the root must not leak into it).
#    Pure Python (py3-none-any): the C++ kernels ship as sources and torch's cpp_extension compiles them there.
SRC=$(mktemp -d /tmp/sarlab-wheel-src.XXXXXX)
trap 'rm -rf "$SRC"' EXIT
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$SRC"
(cd "$SRC" && "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$W" .) >/dev/null
SW=$(ls "$W"/sarlab-*.whl)
# the wheel must hold every kernel source the loader compiles, and the shipped profiles and datasets
"$PY" - "$SW" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["sarlab/kernels/csrc/kernels.h", "sarlab/kernels/_loader.py", "sarlab/real/commands/cli.py",
        "sarlab/simulator/hardware/describe.py", "sarlab/__main__.py"]
src = sorted(n for n in names if n.startswith("sarlab/kernels/") and n.endswith((".cpp", ".h", ".hpp")))
missing = [n for n in need if n not in names]
# every .cpp the loader lists in SOURCES
import re, pathlib
loader = pathlib.Path("kernels/_loader.py").read_text()
m = re.search(r"SOURCES\s*=\s*\(([^)]*)\)", loader)
for s in re.findall(r"[\"']([\w.]+\.cpp)[\"']", m.group(1) if m else ""):
    if f"sarlab/kernels/csrc/{s}" not in names:
        missing.append(f"sarlab/kernels/csrc/{s}")
print(f"prepare: {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, kernel sources {', '.join(p.rsplit('/', 1)[-1] for p in src)}")
print(f"prepare: shipped profiles {sum(n.startswith('sarlab/simulator/profiles/') and n.endswith('.json') for n in names)}, "
      f"planetoid {sum(n.endswith('.npz') for n in names)}")
if missing:
    sys.exit(f"prepare: the wheel lacks {missing}")
PY

# which tree the wheel holds (device.sh keeps this file with the results)
{ echo "commit $(git rev-parse HEAD) ($(git status --short -uno | wc -l) tracked files changed)"
  echo "built $(date -u +%FT%TZ) from the working tree: $(basename "$SW")"; } > "$W/SOURCE.txt"
echo "prepare: wheels in .whl/:"
ls -l "$W" | awk 'NR>1 {printf "  %10d  %s\n", $5, $9}'
echo "prepare: .whl/ total $(du -cb "$W"/*.whl | tail -1 | cut -f1) bytes"
# what travels: tracked + untracked-not-ignored files, plus the carried .whl/
tree=$(git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
       | du -cb --files0-from=- | tail -1 | cut -f1)
whl=$(du -cb "$W" | tail -1 | cut -f1)
echo "prepare: travels: tree $tree + .whl $whl = $((tree + whl)) bytes ($(( (tree + whl) / 1048576 )) MiB of 64 MiB)"
