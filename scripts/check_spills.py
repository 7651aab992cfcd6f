#!/usr/bin/env python3
"""Stack traffic inside the FMA loops of the kernels' per-ISA copies (a developer's check;
the build and tests do not need it).

    python3 scripts/check_spills.py [build/plugins/kernels/libtrident_kernels.so]

For every function copy named *_avx512 or *_avx2, objdump's disassembly is cut into loops
(a backward jump and its target); an innermost loop that holds a packed FMA (vfmadd...ps
on ymm/zmm) is a tile loop, and a vector store there to the stack (%rsp/%rbp) is a
spilled register when the loop also reads that slot back (a store never read there is
a dead copy, not a spill). Vector loads from the stack with no
store are counted apart: loop-invariant constants GCC keeps in the frame (an L1 load, as
from the constant pool), not spills. Prints one line per copy that has FMA loops, and
exits 1 when any such loop spills. Cold paths outside the loops are not counted."""
import re
import subprocess
import sys

lib = sys.argv[1] if len(sys.argv) > 1 else "build/plugins/kernels/libtrident_kernels.so"
dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True, check=True).stdout
funcs, name = {}, None
for line in dis.splitlines():
    m = re.match(r"^([0-9a-f]+) <(.+)>:$", line)
    if m:
        name = m.group(2)
        funcs[name] = []
        continue
    m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
    if m and name:
        funcs[name].append((int(m.group(1), 16), m.group(2)))

bad = 0
for name, ins in sorted(funcs.items()):
    if not re.search(r"_(avx512|avx2)$", name):
        continue
    loops = []
    for addr, text in ins:
        m = re.match(r"j\w+\s+([0-9a-f]+)\s+<", text)
        if m and int(m.group(1), 16) < addr:
            loops.append((int(m.group(1), 16), addr))
    fma_loops = spills = reads = 0
    for lo, hi in loops:
        body = [t for a, t in ins if lo <= a <= hi]
        if not any(re.match(r"vfmadd\w*p[sd]\s.*%[yz]mm", t) for t in body):
            continue
        # innermost only: skip a loop that contains another FMA loop
        inner = [l for l in loops if l != (lo, hi) and lo <= l[0] and l[1] <= hi]
        if any(any(re.match(r"vfmadd\w*p[sd]\s.*%[yz]mm", t) for a, t in ins if l[0] <= a <= l[1]) for l in inner):
            continue
        fma_loops += 1
        stored, loaded = {}, set()
        for t in body:
            if not (re.search(r"%[xyz]mm", t) and re.search(r"\(%r[sb]p\)", t)):
                continue
            slot = re.search(r"(-?(?:0x[0-9a-f]+)?\(%r[sb]p\))", t).group(1)
            if re.search(r"%[xyz]mm\d+,\s*-?(0x[0-9a-f]+)?\(%r[sb]p", t):
                stored[slot] = stored.get(slot, 0) + 1
            else:
                loaded.add(slot)
        spills += sum(n for slot, n in stored.items() if slot in loaded)
        reads += sum(1 for slot in loaded if slot not in stored)
    if fma_loops:
        print(f"{name:32s} {fma_loops:3d} FMA loops: {spills:3d} vector stores to the stack, "
              f"{reads:3d} reads of kept constants")
        bad += spills > 0
sys.exit(1 if bad else 0)
