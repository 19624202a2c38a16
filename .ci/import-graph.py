#!/usr/bin/env python3
# A second reading, independent of tests/it/tidy.rs, of src/'s module import graph: regex over the text
# (crate:: and super:: paths, {..} groups flattened by token), Tarjan SCCs.
import os, re, sys
root = sys.argv[1]
mods = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(d, f); rel = os.path.relpath(p, root)
        if rel.startswith('bin/'): continue
        parts = rel[:-3].split('/')
        if parts[-1] == 'mod': parts.pop()
        text = open(p).read()
        i = text.find('#[cfg(test)]\nmod tests')
        if i >= 0: text = text[:i]
        text = re.sub(r'//[^\n]*', '', text)
        mods['::'.join(parts)] = text
names = set(mods)
def deepest(segs):
    for n in range(len(segs), 0, -1):
        m = '::'.join(segs[:n])
        if m in names: return m
edges = {m: set() for m in mods}
for m, text in mods.items():
    me = m.split('::') if m != 'lib' else []
    anc = {'::'.join(me[:k]) for k in range(len(me))}
    # Flatten `a::{b, c::d}` into a::b and a::c::d (one level is enough here).
    for mt in re.finditer(r'\b(crate::|(?:super::)+)((?:\w+::)*)(\{[^}]*\}|\w+)?', text):
        head, mid, tail = mt.group(1), mt.group(2), mt.group(3) or ''
        items = [x.strip() for x in tail.strip('{}').split(',')] if tail.startswith('{') else [tail]
        for it in items:
            path = (mid + it).strip(':').split('::')
            if head == 'crate::':
                segs = path
                t = deepest(segs)
                if t and t != m: edges[m].add(t)
            else:
                up = head.count('super::')
                base = me[:len(me) - up] if up <= len(me) else None
                if base is None: continue
                t = deepest(base + path)
                if t and t != m and t not in anc: edges[m].add(t)
# Tarjan
idx = {}; low = {}; on = set(); st = []; sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in mods:
    if v not in idx: sc(v)
print(len(mods), 'modules,', sum(len(e) for e in edges.values()), 'edges,', len(sccs), 'cycles')
for s in sccs: print(' cycle:', ' '.join(sorted(s)))
sys.exit(1 if sccs else 0)
