#!/usr/bin/env bash
# Builds the peers' virtual environments outside the repo, from PyPI only, once: a venv whose
# marker file exists is reused. Usage: bench/peers/setup_envs.sh [--root DIR] [tfra] [torchrec]
# (default root ~/.cache/xdl-ec-peers, default both). Plain Keras needs no venv: it runs on the
# installed TF.
set -euo pipefail
root="${XDL_EC_PEERS_ROOT:-$HOME/.cache/xdl-ec-peers}"
names=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    tfra|torchrec) names+=("$1"); shift ;;
    *) echo "setup_envs.sh: unknown argument '$1' (expected --root DIR, tfra, torchrec)" >&2; exit 2 ;;
  esac
done
[[ ${#names[@]} -eq 0 ]] && names=(tfra torchrec)

# TFRA 0.8.1's ops are built against TF 2.16.x (Keras 2 API, so tf-keras beside it, which asks for
# 'tensorflow', the same CPU wheel on Linux); that TF wants numpy < 2.
tfra_pkgs=(tensorflow==2.16.2 tf-keras==2.16.0 tensorflow-recommenders-addons==0.8.1 'numpy<2')
# torch 2.13.0 (CPU) is the wheel this machine keeps on disk; fbgemm-gpu-cpu / torchrec 1.8.0 are
# the releases built against it (1.9.x wants torch 2.14). torchrec declares a dependency on
# 'fbgemm-gpu', the CUDA build (~500 MB, and it would shadow fbgemm-gpu-cpu's fbgemm_gpu module),
# so torchrec goes in without its dependencies and its other requirements are named here.
torchrec_pkgs=(torch==2.13.0 fbgemm-gpu-cpu==1.8.0 numpy)
torchrec_nodeps=(torchrec==1.8.0)
torchrec_rest=(torchmetrics==1.0.3 tensordict pyre-extensions iopath tqdm)

for name in "${names[@]}"; do
  venv="$root/$name"
  marker="$venv/.xdl-ec-peer-ready"
  if [[ -f "$marker" ]]; then
    echo "[$name] reusing $venv"
    continue
  fi
  echo "[$name] building $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  if [[ $name == tfra ]]; then pkgs=("${tfra_pkgs[@]}"); else pkgs=("${torchrec_pkgs[@]}"); fi
  "$venv/bin/python" -m pip install "${pkgs[@]}"
  if [[ $name == torchrec ]]; then
    "$venv/bin/python" -m pip install --no-deps "${torchrec_nodeps[@]}"
    "$venv/bin/python" -m pip install "${torchrec_rest[@]}" torch==2.13.0
    pkgs+=("${torchrec_nodeps[@]}" "${torchrec_rest[@]}")
  fi
  printf '%s\n' "${pkgs[@]}" > "$marker"
  echo "[$name] ready"
done
