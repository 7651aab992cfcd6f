#!/usr/bin/env bash
# No CUDA kernel of the library spills registers on sm_80 or sm_90: fails naming every
# kernel (demangled) whose spill stores or spill loads are above 0, per architecture.
#
# Usage: cuda_spills.sh LIB NVCC ARCHS SRC_DIR INCLUDE_DIRS
#   LIB           the built libtrident_kernels.so
#   NVCC          the nvcc that built it (ptxas and, where installed, cuobjdump beside it)
#   ARCHS         the architectures to check, "80:90" (":" or ";" between; "90-real" is 90)
#   SRC_DIR       plugins/kernels/cuda (the .cu files, for the fallback)
#   INCLUDE_DIRS  the .cu files' include directories, ":"- or ";"-separated (for the fallback)
#
# cuobjdump --dump-resource-usage gives each kernel's registers, STACK and LOCAL bytes but
# no spill counts (a stack frame is also local arrays and the slow paths of sin/cos), so
# with cuobjdump (beside nvcc, on PATH, or $CUOBJDUMP) the PTX the library embeds for
# each architecture is extracted (cuobjdump -xptx) and given to ptxas -v, which prints
# "N bytes spill stores, M bytes spill loads" per function: the numbers the build's own
# ptxas saw (nvcc passes it no options here). The resource usage is printed for the
# kernels that have a stack frame, as information. Without cuobjdump (the CUDA wheels
# of this machine and CI ship none) each .cu is compiled again, nvcc -cubin -Xptxas -v
# per architecture, and the same lines are read.
set -u
lib=$1 nvcc=$2 archs=$3 src=$4 incs=$5
[ -f "$lib" ] || { echo "cuda_spills: $lib not built"; exit 1; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
bindir=$(dirname "$nvcc")
ptxas=$bindir/ptxas
[ -x "$ptxas" ] || ptxas=$(command -v ptxas || true)
[ -n "$ptxas" ] || { echo "cuda_spills: no ptxas beside $nvcc or on PATH"; exit 1; }
cuobjdump=${CUOBJDUMP:-}
[ -n "$cuobjdump" ] || { [ -x "$bindir/cuobjdump" ] && cuobjdump=$bindir/cuobjdump; }
[ -n "$cuobjdump" ] || cuobjdump=$(command -v cuobjdump || true)
demangle=cat
command -v c++filt >/dev/null && demangle=c++filt

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
arch_list=()
IFS=':;' read -r -a raw_archs <<<"$archs"
for a in "${raw_archs[@]}"; do a=${a%%-*}; [[ $a =~ ^[0-9]+$ ]] && arch_list+=("$a"); done
[ ${#arch_list[@]} -gt 0 ] || { echo "cuda_spills: no architecture in '$archs'"; exit 1; }
log=$tmp/ptxas.log
: >"$log"

if [ -n "$cuobjdump" ]; then
  echo "cuda_spills: $lib through $cuobjdump -xptx and $ptxas -v"
  "$cuobjdump" --dump-resource-usage "$lib" >"$tmp/res.txt" 2>&1 || { cat "$tmp/res.txt"; exit 1; }
  (cd "$tmp" && "$cuobjdump" -xptx all "$lib" >/dev/null) || exit 1
  for a in "${arch_list[@]}"; do
    "$cuobjdump" --list-elf "$lib" | grep -q "sm_$a\.cubin" || { echo "cuda_spills: $lib has no sm_$a code"; exit 1; }
    n=0
    for p in "$tmp"/*.sm_"$a".ptx; do
      [ -f "$p" ] || continue
      "$ptxas" -arch=sm_"$a" -v -o /dev/null "$p" >>"$log" 2>&1 || { echo "cuda_spills: ptxas failed on $p"; tail -20 "$log"; exit 1; }
      n=$((n + 1))
    done
    [ $n -gt 0 ] || { echo "cuda_spills: no sm_$a PTX in $lib"; exit 1; }
  done
  # information: the kernels that have a stack frame, and their resource usage
  awk '/^arch = /{arch=$3} /Function /{fn=$2; sub(/:$/, "", fn)} /STACK:[1-9]/{print "  " arch " " fn " " $0}' \
    "$tmp/res.txt" | $demangle | sed 's/^/cuda_spills: stack frame (not a spill by itself): /' | sort -u
else
  echo "cuda_spills: no cuobjdump beside $nvcc or on PATH: compiling $src/*.cu again with -Xptxas -v"
  inc_flags=()
  IFS=':;' read -r -a inc_list <<<"$incs"
  for d in "${inc_list[@]}"; do [ -n "$d" ] && inc_flags+=(-I"$d"); done
  for a in "${arch_list[@]}"; do
    for f in "$src"/*.cu; do
      "$nvcc" -std=c++17 -O3 -arch=sm_"$a" -cubin -Xptxas -v "${inc_flags[@]}" -o "$tmp/k.cubin" "$f" >>"$log" 2>&1 ||
        { echo "cuda_spills: nvcc failed on $f for sm_$a"; tail -30 "$log"; exit 1; }
    done
  done
fi

# "Compiling entry function 'F' for 'sm_A'" then "Function properties for F" then
# "    S bytes stack frame, X bytes spill stores, Y bytes spill loads"
awk '
  /Compiling entry function/ { match($0, /for .sm_[0-9]+/); arch = substr($0, RSTART + 5, RLENGTH - 5) }
  /Function properties for/ { fn = $NF }
  /bytes spill stores/ {
    n++
    st = $0; sub(/ bytes spill stores.*/, "", st); sub(/.*, /, "", st)
    ld = $0; sub(/ bytes spill loads.*/, "", ld); sub(/.*, /, "", ld)
    if (st + 0 > 0 || ld + 0 > 0) { bad++; printf "SPILL %s %s: %d bytes spill stores, %d bytes spill loads\n", arch, fn, st, ld }
  }
  END { printf "checked %d functions\n", n; exit bad > 0 ? 1 : 0 }
' "$log" >"$tmp/result.txt"
rc=$?
grep '^SPILL' "$tmp/result.txt" | while read -r tag arch fn rest; do
  echo "cuda_spills: $arch $(echo "$fn" | $demangle) $rest"
done | sort -u
checked=$(grep '^checked' "$tmp/result.txt")
if ! grep -q 'bytes spill stores' "$log"; then
  echo "cuda_spills: ptxas printed no resource lines"; exit 1
fi
if [ $rc -ne 0 ]; then
  echo "cuda_spills: FAIL: the kernels above spill registers ($checked)"
  exit 1
fi
echo "cuda_spills: no spills on $(printf 'sm_%s ' "${arch_list[@]}")($checked)"
exit 0
