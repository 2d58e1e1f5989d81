#!/usr/bin/env bash
# Device call for the gated activation in the gate/up GEMM's store: the CUDA tests, the 4096-token
# prefill's kernels (ncu) with the fused store and without it (lab `glu-apart`), then prefill and
# batch-1 decode of the three settings and of .carry/a (the build before) interleaved.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
for v in glu-apart glu-nof32; do
  printf '#!/usr/bin/env bash\nTF_LAB_M1=%s exec %s/.carry/tensorfold "$@"\n' "$v" "$PWD" > ".carry/$v.sh"
  chmod +x ".carry/$v.sh"
done
STEPS=tests bash scripts/device/run_all.sh > "$OUT/run_tests.log" 2>&1
grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
for v in fused glu-apart; do
  echo "== prefill kernels, $v"
  lab=$v; [[ $v == fused ]] && lab=""
  TF_LAB_M1=$lab WHOLE=1 PROMPT=4096 OUT=$OUT/$v bash scripts/device/profile_prefill.sh 2>&1 | head -16
done
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 32 --repeat 1" \
  bash scripts/device/abc.sh "O=.carry/a/tensorfold F=.carry/tensorfold A=.carry/glu-apart.sh N=.carry/glu-nof32.sh" 2
