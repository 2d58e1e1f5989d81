#!/usr/bin/env bash
# Device call: prefill kernels (ncu, caches kept) of the default build and of lab settings.
#   PROMPT=128  LABS="glu-apart"
set -u
for v in default ${LABS-glu-apart}; do
  echo "== prefill ${PROMPT:-128} kernels, $v"
  lab=$v; [[ $v == default ]] && lab=""
  TF_LAB_M1=$lab WHOLE=1 PROMPT=${PROMPT:-128} CACHE=none OUT=/tmp/tf-out/$v bash scripts/device/profile_prefill.sh 2>&1 | head -14
done
