# Sourced by integration scripts: makes sure BUILD/oracle holds the
# torchvision exports named in $models (tests/oracle/export_torchvision.py),
# exporting only the missing ones. Sets $out. Exits 77 without torch (a
# failure: CTest has no SKIP_RETURN_CODE for it; install-deps.sh installs torch).
#   requires: $build, $repo, $models (array)
python=/usr/bin/python3
out=$build/oracle
if ! "$python" -c "import torch, torchvision" 2>/dev/null; then
  echo "FAIL: missing dependency: $python lacks torch/torchvision (deploy/install-deps.sh installs python3-torch, python3-torchvision)"
  exit 77
fi
mkdir -p "$out"
missing=()
for m in "${models[@]}"; do [[ -f $out/$m.onnx ]] || missing+=("$m"); done
if ((${#missing[@]})); then
  echo "exporting ${missing[*]} into $out"
  "$python" "$repo/tests/oracle/export_torchvision.py" "$out" --models "${missing[@]}" || { echo "FAIL: export_torchvision.py"; exit 1; }
fi
