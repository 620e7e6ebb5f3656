#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_layers.py -- the include graph between the folders of src/, and a check that it
has no cycle (each folder only includes folders below it: the pipeline's arrows point
down). Usage: check_layers.py [SRC_DIR] [--graph]. Exit 1 on a cycle, naming the files
whose includes close it. Bare includes ("clock.h") resolve through the same search path
as the build (include/, src/, src/core, src/algo).
A nested folder is a node of its own, named by its path under src/ ("store/memory",
"api/http"): the store's interface (store/) sits below both stores (store/memory,
store/redis), and the protocol rooms under api/ sit on either side of the server (see
DEVELOPERS.md), so counting them as their parent would hide real arrows."""
import os
import re
import sys

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def node_of(rel):
    """The node of a file given by its path under src/: its folder ("store/memory"), or
    None for a file directly in src/."""
    d = os.path.dirname(rel)
    return d.replace(os.sep, '/') if d else None


def folder_of(src, name, here):
    """The src/ folder an include resolves to (None for the public header or generated)."""
    cands = [os.path.join(os.path.dirname(here), name), os.path.join(src, name),
             os.path.join(src, 'core', name), os.path.join(src, 'algo', name)]
    for c in cands:
        if os.path.isfile(c):
            return node_of(os.path.relpath(os.path.realpath(c), os.path.realpath(src)))
    return None


def graph(src):
    edges = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(('.c', '.h')):
                continue
            path = os.path.join(dirpath, f)
            me = node_of(os.path.relpath(path, src))
            with open(path, encoding='utf-8', errors='replace') as fh:
                for name in INC.findall(fh.read()):
                    to = folder_of(src, name, path)
                    if to and to != me:
                        edges.setdefault((me, to), []).append(os.path.relpath(path, src))
    return edges


def find_cycle(nodes, adj):
    color, stack = {}, []

    def dfs(u):
        color[u] = 1
        stack.append(u)
        for v in sorted(adj.get(u, ())):
            if color.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if not color.get(v):
                c = dfs(v)
                if c:
                    return c
        stack.pop()
        color[u] = 2
        return None

    for n in sorted(nodes):
        if not color.get(n):
            c = dfs(n)
            if c:
                return c
    return None


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), '..', 'src')
    edges = graph(src)
    adj, nodes = {}, set()
    for (a, b) in edges:
        adj.setdefault(a, set()).add(b)
        nodes |= {a, b}
    if '--graph' in sys.argv:
        for a in sorted(adj):
            print('%-12s -> %s' % (a, ', '.join(sorted(adj[a]))))
    cyc = find_cycle(nodes, adj)
    if cyc:
        print('include cycle between folders: ' + ' -> '.join(cyc), file=sys.stderr)
        for a, b in zip(cyc, cyc[1:]):
            print('  %s -> %s: %s' % (a, b, ', '.join(sorted(set(edges[(a, b)]))[:4])),
                  file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
