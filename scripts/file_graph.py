#!/usr/bin/env python3
"""scripts/file_graph.py SRC_DIR [OBJ_DIR] — the graph of includes and calls
between the library's source files: its floors, its cycles and the edges
that run back up.

A node is a module of src/: a .c file and the header of the same name in the
same folder (core/tensor.c + core/tensor.h) are one node; a header with no .c
of its name is a node of its own. A edge A -> B says "A needs B":
  - A includes a private header of B ("core/core.h", a header of its folder);
  - A's object uses a symbol B's object defines (nm over OBJ_DIR, the
    library's CMake object directory for src/, build/CMakeFiles/
    remat_objects.dir/src): calls, and functions or tables taken by address
    (not the remat_abi_* reference remat/version.h plants in every file).
Without OBJ_DIR only includes are counted.

The strongly connected components of more than one node are the cycles.
Inside each, the nodes are ordered so that as many edges as possible point
down (Eades, Lin and Smyth's greedy heuristic for a small feedback arc set);
the edges left pointing up are the "edges running back up". Without them the
graph is acyclic, and a node's floor is the length of the longest chain of
needs below it (floor 0 needs nothing). Printed: the counts, every cycle with
its members, every edge running back up and the files of each floor.
--summary prints the counts only.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = ('.c', '.h', '.cu', '.cuh')


def module_of(rel):
    base, ext = os.path.splitext(rel)
    return base if ext in SOURCES else None


def collect(src):
    files = []
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith(SOURCES):
                files.append(os.path.relpath(os.path.join(root, n), src))
    return sorted(files)


def include_edges(src, files, nodes):
    edges = set()
    for f in files:
        with open(os.path.join(src, f), encoding='utf-8', errors='replace') as fh:
            text = fh.read()
        a = module_of(f)
        for inc in INCLUDE.findall(text):
            if inc.startswith('remat/'):
                continue  # the public API lives in include/, not in src/
            here = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            target = here if os.path.exists(os.path.join(src, here)) else os.path.normpath(inc)
            b = module_of(target)
            if b in nodes and b != a:
                edges.add((a, b))
    return edges


def nm_symbols(path):
    out = subprocess.run(['nm', '-P', path], capture_output=True, text=True, check=False).stdout
    defs, uses = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == 'U':
            uses.add(name)
        elif kind in 'TDBRCVWGS':
            defs.add(name)
    return defs, uses


def symbol_edges(obj, nodes):
    definer, users = {}, defaultdict(set)
    for root, _, names in os.walk(obj):
        for n in names:
            if not n.endswith('.o'):
                continue
            rel = os.path.relpath(os.path.join(root, n[:-2]), obj)  # "core/tensor.c"
            a = module_of(rel)
            if a not in nodes:
                continue
            defs, uses = nm_symbols(os.path.join(root, n))
            for s in defs:
                definer[s] = a
            users[a] |= uses
    edges = set()
    for a, uses in users.items():
        for s in uses:
            if s.startswith('remat_abi_'):
                continue  # remat/version.h's link-time ABI check, in every file that includes it
            b = definer.get(s)
            if b and b != a:
                edges.add((a, b))
    return edges


def sccs(nodes, succ):
    """Tarjan, iterative; components in reverse topological order."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def els_order(comp, succ):
    """Eades-Lin-Smyth: an order of comp in which few edges point up (from a
    later node to an earlier one)."""
    left = set(comp)
    outs = {v: {w for w in succ[v] if w in left} for v in comp}
    ins = {v: set() for v in comp}
    for v in comp:
        for w in outs[v]:
            ins[w].add(v)
    head, tail = [], []

    def drop(v):
        left.discard(v)
        for w in outs[v]:
            ins[w].discard(v)
        for w in ins[v]:
            outs[w].discard(v)

    while left:
        changed = True
        while changed:
            changed = False
            for v in sorted(left):
                if not outs[v]:  # needs nothing left: goes to the bottom
                    tail.append(v)
                    drop(v)
                    changed = True
                elif not ins[v]:  # nothing left needs it: goes to the top
                    head.append(v)
                    drop(v)
                    changed = True
        if left:
            v = max(sorted(left), key=lambda x: len(outs[x]) - len(ins[x]))
            head.append(v)
            drop(v)
    return head + tail[::-1]


def main(argv):
    summary = '--summary' in argv
    args = [a for a in argv[1:] if a != '--summary']
    if not args:
        sys.stderr.write(__doc__)
        return 2
    src = args[0]
    obj = args[1] if len(args) > 1 else None
    files = collect(src)
    nodes = {module_of(f) for f in files}
    edges = include_edges(src, files, nodes)
    if obj:
        edges |= symbol_edges(obj, nodes)
    succ = defaultdict(set)
    for a, b in edges:
        succ[a].add(b)
    comps = sccs(nodes, succ)
    cycles = [c for c in comps if len(c) > 1]
    up = set()
    for c in cycles:
        pos = {v: i for i, v in enumerate(els_order(c, succ))}
        for a in c:
            for b in succ[a]:
                if b in pos and pos[b] < pos[a]:
                    up.add((a, b))
    floor = {}
    for c in comps:  # reverse topological: what a component needs comes first
        # inside a component, settle the nodes in the order whose edges point down
        order = els_order(c, succ) if len(c) > 1 else c
        for v in reversed(order):
            below = [floor[w] for w in succ[v] if (v, w) not in up and w in floor]
            floor[v] = 1 + max(below) if below else 0
    n_floors = 1 + max(floor.values()) if floor else 0
    print(f'nodes {len(nodes)}  edges {len(edges)}  floors {n_floors}  '
          f'edges running back up {len(up)}  cycles {len(cycles)}'
          + (f' (sizes {", ".join(str(len(c)) for c in cycles)})' if cycles else ''))
    if summary:
        return 0
    for i, c in enumerate(cycles):
        print(f'\ncycle {i + 1} ({len(c)} nodes): ' + ' '.join(c))
    if up:
        print('\nedges running back up:')
        for a, b in sorted(up):
            print(f'  {a} -> {b}')
    print('\nfloors:')
    by = defaultdict(list)
    for v, fl in floor.items():
        by[fl].append(v)
    for fl in sorted(by, reverse=True):
        print(f'  {fl:2d}: ' + ' '.join(sorted(by[fl])))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
