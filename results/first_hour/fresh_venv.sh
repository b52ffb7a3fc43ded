#!/bin/bash
# A fresh venv with a sarlab wheel installed (no editable checkout on its path), reusing the dependencies already
# installed in the checkout's .venv (torch, PyG, ...) through a .pth line instead of downloading them again.
# Usage: fresh_venv.sh WHEEL VENV_DIR     e.g.
#   git worktree add /tmp/before dd6ffad && .venv/bin/pip wheel --no-deps --no-build-isolation /tmp/before -w /tmp/wheels/before
#   results/first_hour/fresh_venv.sh /tmp/wheels/before/sarlab-*.whl /tmp/venv-before
set -euo pipefail
wheel=$1; venv=$2
deps=${DEPS_SITE:-/work/main/.venv/lib/python3.11/site-packages}
py=${BASE_PYTHON:-$(readlink -f /work/main/.venv/bin/python)}
rm -rf "$venv"
"$py" -m venv "$venv"
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$deps" > "$site/zz_reuse_checkout_deps.pth"   # a plain path: the checkout's editable finder is not activated
"$venv/bin/python" -m pip install -q --no-deps --no-index "$wheel"
cd /tmp && "$venv/bin/python" -c "import sarlab, sarlab.kernels; print('sarlab from', sarlab.__file__)"
