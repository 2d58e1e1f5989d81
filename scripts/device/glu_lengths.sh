#!/usr/bin/env bash
# Device call: the CUDA tests, the 4096-token prefill's kernels (ncu) with the GLU store and
# without it (lab `glu-apart`), then prefill by prompt length for the build before (.carry/a), the
# default and `glu-apart`, interleaved: where the store in the GEMM starts to pay.
#   PROMPTS=128,256,512,1024,2048,4096  ROUNDS=2  TESTS=1
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
printf '#!/usr/bin/env bash\nTF_LAB_M1=glu-apart exec %s/.carry/tensorfold "$@"\n' "$PWD" > .carry/glu-apart.sh
chmod +x .carry/glu-apart.sh
if [[ ${TESTS:-1} == 1 ]]; then
  STEPS=tests bash scripts/device/run_all.sh > "$OUT/run_tests.log" 2>&1
  grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
fi
PROMPT=4096 bash scripts/device/prefill_kernels.sh 2>&1 | grep -v "^in order"
ARGS="--prompt-len ${PROMPTS:-128,256,512,1024,2048,4096} --batch 1 --gen-len 4 --repeat 1" \
  bash scripts/device/abc.sh "O=.carry/a/tensorfold F=.carry/tensorfold A=.carry/glu-apart.sh" "${ROUNDS:-2}"
