#!/bin/bash
# cu2cpp.sh IN.cu OUT.cpp: the two CUDA-only syntaxes of the kernels, as cuemu.h runs them.
#   kernel<T, N><<<grid, block, smem, stream>>>(args)
#     -> tr_cuemu::launch(tr_cuemu::cfg(grid, block, smem, stream), kernel<T, N>)(args)
#   extern __shared__ __align__(128) unsigned char smem[];
#     -> unsigned char *smem = (unsigned char *)tr_cuemu::dyn_smem();
# One launch per line, template arguments not nested (what plugins/kernels/cuda holds);
# a launch left untranslated fails the compile (g++ reads <<< as a syntax error).
set -euo pipefail
in=$1 out=$2
{
  printf '#line 1 "%s"\n' "$in"
  sed -E \
    -e 's/([A-Za-z_][A-Za-z0-9_:]*(<[^<>]*>)?)<<<(.*)>>>\(/tr_cuemu::launch(tr_cuemu::cfg(\3), \1)(/' \
    -e 's/extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) +([A-Za-z_][A-Za-z0-9_]*)\[\];/\2 *\3 = (\2 *)tr_cuemu::dyn_smem();/' \
    "$in"
} > "$out.tmp"
mv "$out.tmp" "$out"
