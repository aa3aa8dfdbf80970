# Sourced by scripts/demo and scripts/test: install what is missing from Debian 12's
# packages (as root, or through sudo), and nothing when everything is there.
lmp_install_deps() {
  pkgs="g++ cmake ninja-build pkg-config libcli11-dev libfmt-dev libopenblas-dev libicu-dev catch2 $*"
  missing=""
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "installing:$missing" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then sudo=sudo; else
      echo "error: missing packages:$missing (run as root, or install sudo)" >&2; return 1; fi
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# lmp_install_npm DIR PACKAGE@VERSION...: the npm peers (conformance tests, benchmarks)
# in DIR/node_modules, installed when missing; node and npm from Debian when absent.
lmp_install_npm() {
  dir=$1
  shift
  command -v npm >/dev/null || lmp_install_deps nodejs npm || return 1
  need=""
  for p in "$@"; do
    name=${p%@*}
    [ -f "$dir/node_modules/$name/package.json" ] || need="$need $p"
  done
  [ -z "$need" ] && return 0
  # All of them, not only the missing ones: with --no-save, npm removes from node_modules
  # whatever the command line does not name.
  echo "npm install:$need" >&2
  mkdir -p "$dir" && (cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error "$@" >/dev/null)
}

# lmp_test_peers: the peers of the conformance tests. spm_encode, spm_train,
# SentencePiece's Python binding (its offsets) and NumPy (to read the .npy files lmpipe
# writes) from Debian; HF tokenizers' node binding,
# @huggingface/gguf (an independent GGUF reader) and llama.cpp's prebuilt x64 libraries
# (@node-llama-cpp/linux-x64: GGML's k-quant code, called from Python) from npm into
# $LMPIPE_NPM_DIR (default
# ~/.cache/lmpipe-npm). Without npm's peers (no route to the registry, say) the tests
# that need them are skipped, not failed. Exports LMPIPE_NODE_PATH.
lmp_test_peers() {
  lmp_install_deps sentencepiece python3-numpy python3-sentencepiece "$@"
  npm_dir=${LMPIPE_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lmpipe-npm}
  lmp_install_npm "$npm_dir" @anush008/tokenizers@0.6.0 @huggingface/gguf@0.4.6 @node-llama-cpp/linux-x64@3.21.1 ||
    echo "warning: npm could not install its peers; the conformance tests against HF tokenizers (conformance.hf_*), tensor_readers and ggml_kquants will be skipped" >&2
  export LMPIPE_NODE_PATH="$npm_dir/node_modules"
}
