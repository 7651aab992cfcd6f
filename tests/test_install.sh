#!/usr/bin/env bash
# The SDK end to end, the way a third-party author meets it:
#   1. `cmake --install` the build into a prefix under the build dir, then move that
#      tree elsewhere (the install is relocatable): every installed library and the
#      program still find trident's libraries, the prefix's own copies;
#   2. build examples/backend_minimal against the moved prefix with its own CMake
#      project (find_package(trident)), with no path of the source tree on the include
#      or link line, linking the kernels and, through them, the base; and once more with
#      pkg-config and the compiler alone; an application built with pkg-config's Libs
#      calls the base directly;
#   3. the installed `trident`, with no TRIDENT_PLUGIN_PATH, lists its own installed
#      backends and the example (through an INI's [plugins] path), runs BERT tiny
#      predict and fit on torch and the example side by side and finds them in agreement,
#      refuses an unknown [backend.minimal] key by name, and passes check-backend;
#   4. examples/run_bert, an application on the models library, built against the moved
#      prefix with CMake (trident::models) and with pkg-config (trident-models) and the
#      compiler: both print the same logits as the in-tree build, from the installed torch,
#      and `trident run` of the same INI agrees with them: the replay test plugin
#      (tests/plugins/backend_test.c) hands it the printed logits as a second backend's,
#      which the harness compares with torch's, and a copy 0.1% off in one value fails.
# It runs in the sanitizer build too: the backends are built without the sanitizer flags
# (as a third party would) and loaded into the instrumented program; an application is
# built with them (ASan's runtime must come first in a program).
# usage: tests/test_install.sh CMAKE BUILD_DIR   (as ctest runs it)
set -u
cmake=$1 build=$(cd "$2" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
unset TRIDENT_PLUGIN_PATH
work=$build/install-test
rm -rf "$work"
mkdir -p "$work"
tmp=$work
. "$src/tests/harness.sh"

# ---- 1. install, then move the tree ----
expect "cmake --install" 0 'trident-config.cmake' -- "$cmake" --install "$build" --prefix "$work/staged" || finish
mv "$work/staged" "$work/prefix"
prefix=$work/prefix
missing=""
for f in bin/trident lib/libtrident.so lib/libtrident_kernels.so lib/libtrident_base.so \
         lib/trident/libtrident_backend_torch.so lib/trident/libtrident_backend_tf.so \
         lib/trident/libtrident_backend_jax.so include/trident/backend.h include/trident/kernels.h \
         include/trident/status.h include/trident/tensor.h include/trident/trident.h \
         lib/cmake/trident/trident-config.cmake \
         lib/cmake/trident/trident-config-version.cmake lib/cmake/trident/trident-backend.map \
         lib/pkgconfig/trident.pc share/trident/conf/quickstart.ini \
         lib/libtrident_models.so include/trident/models.h include/trident/model.h \
         lib/pkgconfig/trident-models.pc; do
  [ -e "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "installed tree complete"; else echo "missing:$missing" > "$work/out"; bad "installed tree complete"; fi
bin=$prefix/bin/trident
# A sanitizer build's libraries want an application instrumented as well (ASan's runtime
# first in the program's libraries); a backend, loaded into the program, needs nothing.
san=""
if readelf -d "$prefix/lib/libtrident_base.so" | grep -q libasan; then san="-fsanitize=address,undefined"; fi
# Relative RPATHs: in the moved tree each ELF resolves trident's libraries to the prefix
# ("FILE: LIB DIR" a line, DIR with the ..s of $ORIGIN/.. resolved).
: > "$work/out"
for f in "$bin" "$prefix"/lib/*.so "$prefix"/lib/trident/*.so; do
  env -u LD_LIBRARY_PATH ldd "$f" 2>&1 | awk '/not found/ || $1 ~ /^libtrident/ {print $1, $3}' |
    while read -r lib at; do echo "$f: $lib $(dirname "$(realpath -m "$at")")"; done >> "$work/out"
done
if ! grep -q 'not found' "$work/out" && ! grep -vq " $prefix/lib\$" "$work/out" &&
   [ "$(grep -Ec ' libtrident_base\.so\.[0-9]+ ' "$work/out")" -ge 5 ]; then
  ok "installed libraries and program find libtrident_base and the others in the prefix"
else bad "installed libraries and program find libtrident_base and the others in the prefix"; fi
# Versioned SONAMEs (the top CMakeLists' trident_abi): what a backend built against this
# tree records, so another ABI fails to load rather than to run.
: > "$work/out"
for l in _base _kernels "" _models; do
  readelf -d "$prefix/lib/libtrident$l.so" | grep SONAME >> "$work/out"
done
if [ "$(grep -Ec 'Library soname: \[libtrident(_base|_kernels|_models)?\.so\.[0-9]+\]' "$work/out")" = 4 ]; then
  ok "the libraries carry versioned SONAMEs"; else bad "the libraries carry versioned SONAMEs"; fi

# ---- 2. the example, out of tree: CMake package ----
cp -r "$src/examples/backend_minimal" "$work/example-src"
expect "example configures with find_package(trident)" 0 'Generating done' -- \
  "$cmake" -S "$work/example-src" -B "$work/example" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
expect "example builds" 0 'libtrident_backend_minimal.so' -- "$cmake" --build "$work/example"
so=$work/example/libtrident_backend_minimal.so
# Every include directory the compile used is the prefix's; the link names no file of the
# source tree or the build, only the prefix's kernels library and the base under it.
incs=$(grep -o -- '-I *[^ ]*\|-isystem *[^ ]*' "$work/example/compile_commands.json" | sed 's/^-I *//; s/^-isystem *//' | sort -u)
link=$(cat "$work/example/CMakeFiles/trident_backend_minimal.dir/link.txt")
{ echo "includes: $incs"; echo "link: $link"; } > "$work/out"
stray=$(printf '%s\n' $incs | grep -v "^$prefix/include\$" || true)
if [ -n "$incs" ] && [ -z "$stray" ] && ! grep -Eq "$src/(core|plugins)|$build/(core|plugins)" <<<"$link" &&
   grep -q "$prefix/lib/libtrident_kernels.so" <<<"$link" && grep -q "$prefix/lib/libtrident_base.so" <<<"$link"; then
  ok "nothing from the source tree on the include or link line"
else bad "nothing from the source tree on the include or link line"; fi
nm -D --defined-only "$so" 2>&1 | awk '{print $NF}' > "$work/out"
if [ "$(cat "$work/out")" = "tr_backend_entry" ]; then ok "example exports only tr_backend_entry"; else bad "example exports only tr_backend_entry"; fi
readelf -d "$so" > "$work/out" 2>&1
if ! grep -q 'libtrident\.so' "$work/out"; then ok "example does not link core"; else bad "example does not link core"; fi

# ---- 2b. the same with pkg-config and the compiler alone ----
if command -v pkg-config >/dev/null; then
  mkdir -p "$work/pc"
  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
  expect "example builds with pkg-config" 0 '' -- sh -c "cc -std=c17 -shared -fPIC -fvisibility=hidden \
    \$(pkg-config --cflags trident) '$src/examples/backend_minimal/minimal.c' \
    -o '$work/pc/libtrident_backend_minimal.so' \$(pkg-config --variable=backend_libs trident)"
  expect "the pkg-config build passes check-backend" 0 'the backend conforms' -- \
    "$bin" check-backend "$work/pc/libtrident_backend_minimal.so"
  # An application calls the base (errors, dtypes) itself: Libs must name libtrident_base,
  # or the link fails with "DSO missing from command line".
  printf '%s\n' '#include <stdio.h>' '#include "trident/trident.h"' \
    'int main(void) { struct tr_error e; tr_error_set(&e, TR_ERR_SHAPE, "x");' \
    '  printf("%s %zu\n", tr_status_name(e.status), tr_dtype_size(TR_DTYPE_BF16)); return 0; }' > "$work/pc/app.c"
  expect "an application builds with pkg-config's Libs" 0 '' -- sh -c "cc -std=c17 $san \
    \$(pkg-config --cflags trident) '$work/pc/app.c' -o '$work/pc/app' \$(pkg-config --libs trident) \
    -Wl,-rpath,'$prefix/lib'"
  expect "the application runs on the installed libraries" 0 '^shape error 2$' -- "$work/pc/app"
  # A backend may be written in C++: every installed header compiles as C++ too.
  if command -v c++ >/dev/null; then
    for h in "$prefix"/include/trident/*.h; do echo "#include \"trident/$(basename "$h")\""; done > "$work/pc/all.cpp"
    echo 'int main() { return 0; }' >> "$work/pc/all.cpp"
    expect "every installed header compiles as C++" 0 '' -- sh -c "c++ -std=c++17 -fsyntax-only \
      \$(pkg-config --cflags trident) '$work/pc/all.cpp'"
    # the header declares the entry point inside its extern "C": a C++ definition written
    # as the docs write it keeps its C name (mangled, the loader would find no entry)
    printf '%s\n' '#include "trident/backend.h"' \
      'TR_BACKEND_EXPORT int tr_backend_entry(uint32_t, const struct tr_host_api *, const struct tr_backend_i **iface,' \
      '                                       struct tr_error *) { *iface = nullptr; return TR_ERR_UNSUPPORTED; }' \
      > "$work/pc/entry.cpp"
    expect "a C++ plugin's entry point keeps its C name" 0 '' -- sh -c "c++ -std=c++17 -shared -fPIC \
      -fvisibility=hidden \$(pkg-config --cflags trident) '$work/pc/entry.cpp' -o '$work/pc/libcxx.so'"
    nm -D --defined-only "$work/pc/libcxx.so" > "$work/out" 2>&1
    check "a C++ plugin exports tr_backend_entry unmangled" ' T tr_backend_entry$'
  fi
  expect "the example builds with -Wmissing-prototypes -pedantic" 0 '' -- sh -c "cc -std=c17 -Wall -Wextra -Werror \
    -Wmissing-prototypes -pedantic -fsyntax-only \$(pkg-config --cflags trident) '$src/examples/backend_minimal/minimal.c'"
fi

# ---- 3. the installed program ----
# bert_vs FILE DIR NAME [LINE...]: an INI of BERT tiny predict (batch 2, seq_len 16, warmup 1)
# on torch and on NAME, a backend of the plugin directory DIR; the LINEs after [run]'s own.
bert_vs() {
  local f=$1 dir=$2 name=$3; shift 3
  ini "$f" "[plugins]
path = $dir
[run]
model = bert
preset = tiny
task = predict
backends = torch, $name
batch = 2
seq_len = 16
warmup = 1
$(printf '%s\n' "$@")"
}
bert_vs run.ini "$work/example" minimal 'steps = 2' '[backend.minimal]' 'verbose = false'

expect "installed trident lists its installed backends" 0 "$prefix/lib/trident/libtrident_backend_torch.so" -- "$bin" list "$work/run.ini"
for be in torch tf jax; do
  if grep -A1 -E "^  $be +$prefix/lib/trident/libtrident_backend_$be.so" "$work/out" | grep -q 'from install dir'; then
    ok "$be found in the install dir"; else bad "$be found in the install dir"; fi
done
if grep -q "$build/plugins" "$work/out"; then bad "the installed program does not search the build tree"
else ok "the installed program does not search the build tree"; fi
if grep -A1 -E "^  minimal +$work/example/libtrident_backend_minimal.so" "$work/out" | grep -q 'from \[plugins\] path'; then
  ok "example listed from [plugins] path"; else bad "example listed from [plugins] path"; fi

expect "BERT tiny predict: torch and the example agree" 0 'all backends ran and agree' -- "$bin" run "$work/run.ini"
if grep -Eq '^minimal +[0-9.]+ +[0-9.]+ +[0-9.]+.* ok *$' "$work/out"; then ok "example row agrees with torch"; else bad "example row agrees with torch"; fi
if grep -Eq '^minimal: ran itself: [1-9][0-9]* matmul, [1-9][0-9]* elementwise; shared kernels: [1-9]' "$work/out"; then
  ok "example reports what it ran itself"; else bad "example reports what it ran itself"; fi

sed 's/^task = predict/task = fit/' "$work/run.ini" > "$work/fit.ini"
expect "BERT tiny fit: torch and the example agree on the losses" 0 'all backends ran and agree' -- "$bin" run "$work/fit.ini"
if grep -Eq '^minimal +[0-9.]+ +[0-9.]+ +[0-9. ]+$' "$work/out" && grep -Eq '^minimal +[0-9.]+ +[0-9.]+ +[0-9.]+.* ok *$' "$work/out"; then
  ok "example trains: losses listed and agreeing"; else bad "example trains: losses listed and agreeing"; fi

ini typo.ini "[plugins]
path = $work/example
[run]
model = bert
backends = minimal
steps = 1
warmup = 1
batch = 1
seq_len = 8
[backend.minimal]
own_ops = true
verbsoe = true"
expect "example refuses an unknown key by name, file and line" 1 "typo.ini:12: \[backend.minimal\] unknown key 'verbsoe'" -- \
  "$bin" run "$work/typo.ini"

expect "the example passes check-backend" 0 'the backend conforms' -- "$bin" check-backend minimal "$work/run.ini"

# ---- 4. an application on the models library: examples/run_bert ----
cp -r "$src/examples/run_bert" "$work/run-bert-src"
expect "run_bert configures with find_package(trident)" 0 'Generating done' -- \
  "$cmake" -S "$work/run-bert-src" -B "$work/run-bert" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$san"
expect "run_bert builds" 0 '' -- "$cmake" --build "$work/run-bert"
link=$(cat "$work/run-bert/CMakeFiles/run_bert.dir/link.txt")
echo "link: $link" > "$work/out"
if ! grep -Eq "$src/(core|models|plugins)|$build/(core|models|plugins)" <<<"$link" &&
   grep -q "$prefix/lib/libtrident_models.so" <<<"$link" && grep -q "$prefix/lib/libtrident.so" <<<"$link"; then
  ok "run_bert links the prefix's models library and core, nothing of the build"
else bad "run_bert links the prefix's models library and core, nothing of the build"; fi

# BERT tiny predict at batch 2 (4 logits); replay is the second backend, which run_bert,
# taking the first, leaves to `trident run`.
mkdir -p "$work/replay"
bert_vs bert.ini "$work/replay" replay 'seed = 4321' 'steps = 1' '[backend.replay]' "values = $work/logits.txt"
logits_re='^logits \[2,2\]:( -?[0-9][-+.e0-9]*){4}$'
expect "run_bert runs BERT tiny on the installed torch" 0 "$logits_re" -- "$work/run-bert/run_bert" "$work/bert.ini"
cp "$work/out" "$work/run-bert.out"
if grep -q "on torch ($prefix/lib/trident/libtrident_backend_torch.so)" "$work/run-bert.out"; then
  ok "run_bert found torch in the install dir"; else bad "run_bert found torch in the install dir"; fi
sed -n 's/^logits [^:]*: //p' "$work/run-bert.out" > "$work/logits.txt"
# Finite, not all equal (a graph that ignored its weights or its batch would print one value).
tr ' ' '\n' < "$work/logits.txt" > "$work/out"
if awk '$1 != $1 + 0 || $1 ~ /nan|inf/ { bad = 1 } NR == 1 { first = $1 } $1 != first { differ = 1 }
        END { exit !(NR == 4 && !bad && differ) }' "$work/out"; then
  ok "run_bert's logits are 4 finite numbers, not all equal"; else bad "run_bert's logits are 4 finite numbers, not all equal"; fi

# The in-tree build of the same program on the same INI prints the same logits: the
# installed libraries are the build's.
if [ -x "$build/examples/run_bert" ]; then
  expect "the in-tree run_bert runs" 0 "$logits_re" -- "$build/examples/run_bert" "$work/bert.ini"
  if [ "$(grep '^logits' "$work/out")" = "$(grep '^logits' "$work/run-bert.out")" ]; then
    ok "installed and in-tree run_bert print the same logits"
  else { echo "in-tree:"; grep '^logits' "$work/out"; echo "installed:"; grep '^logits' "$work/run-bert.out"; } > "$work/out.2"
    mv "$work/out.2" "$work/out"; bad "installed and in-tree run_bert print the same logits"; fi
else echo "missing: $build/examples/run_bert (target trident_example_run_bert)" > "$work/out"
  bad "the in-tree run_bert is built"; fi

if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
  expect "run_bert builds with pkg-config's trident-models" 0 '' -- sh -c "cc -std=c17 -Wall -Wextra -Werror $san \
    \$(pkg-config --cflags trident-models) '$src/examples/run_bert/main.c' -o '$work/pc/run_bert' \
    \$(pkg-config --libs trident-models) -Wl,-rpath,'$prefix/lib'"
  expect "the pkg-config run_bert runs" 0 "$logits_re" -- "$work/pc/run_bert" "$work/bert.ini"
  if [ "$(cat "$work/out")" = "$(cat "$work/run-bert.out")" ]; then ok "the pkg-config and CMake run_bert print the same"
  else bad "the pkg-config and CMake run_bert print the same"; fi

  # `trident run` on the same INI: replay's logits are run_bert's, compared with torch's
  # at the f32 tolerance (1e-4); its other outputs it computes with the shared kernels.
  expect "the replay plugin builds" 0 '' -- sh -c "cc -std=c17 -Wall -Wextra -Werror -Wno-unused-parameter -shared \
    -fPIC -fvisibility=hidden -DTP_VARIANT_REPLAY \$(pkg-config --cflags trident) '$src/tests/plugins/backend_test.c' \
    -o '$work/replay/libtrident_backend_replay.so' \
    -Wl,--version-script=\$(pkg-config --variable=backend_map trident) -Wl,--no-undefined"
  expect "trident run agrees with run_bert's logits" 0 'all backends ran and agree' -- "$bin" run "$work/bert.ini"
  if grep -Eq '^replay +[0-9.]+ .* ok *$' "$work/out"; then ok "the replayed logits row agrees with torch"
  else bad "the replayed logits row agrees with torch"; fi
  # The check can fail: one logit 0.1% off is ten times the tolerance.
  cp "$work/logits.txt" "$work/logits.good"
  awk '{ $1 = sprintf("%.9g", $1 * 1.001); print }' "$work/logits.good" > "$work/logits.txt"
  expect "trident run refuses logits 0.1% off" 1 "'replay' differs by [0-9.e+-]+ in output 'logits'" -- \
    "$bin" run "$work/bert.ini"
  cp "$work/logits.good" "$work/logits.txt"
fi
finish
