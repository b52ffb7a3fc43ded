#!/bin/bash
# CPU seconds (user+sys) to compile each translation unit of the kernels, one at a time, with the flags torch's
# JIT build uses (-O3 -march=native -fopenmp, C++20). Usage: build_cpu.sh CSRC_DIR LABEL >> build_cpu.csv
# Columns: label,unit,cpu_s,wall_s,load1 (the 1-minute load average when the unit started; the VM is shared).
set -euo pipefail
csrc=$(cd "$1" && pwd); label=$2
py=${PYTHON:-/work/main/.venv/bin/python}
tinc=$($py -c "import torch.utils.cpp_extension as c; print(' '.join('-isystem ' + p for p in c.include_paths()))")
pinc=$($py -c "import sysconfig; print(sysconfig.get_paths()['include'])")
out=$(mktemp -d)
for src in "$csrc"/*.cpp; do
  unit=$(basename "$src" .cpp); load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%U %S %e" -o "$out/t" c++ -DTORCH_EXTENSION_NAME=sarlab_kernels -DTORCH_API_INCLUDE_EXTENSION_H \
    -I"$csrc" $tinc -isystem "$pinc" -fPIC -std=c++20 -O3 -fopenmp -march=native -c "$src" -o "$out/$unit.o"
  read -r u s e < "$out/t"
  echo "$label,$unit,$(echo "$u + $s" | bc),$e,$load"
done
rm -rf "$out"
