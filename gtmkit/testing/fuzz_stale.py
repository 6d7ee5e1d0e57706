"""Fuzz kind "stale": requests held while the index they were encoded against is replaced.

A case builds a small random catalog's index, encodes random users (values outside the domain, strings no ad
mentions, values only a later version holds) and stacks some of them into batches, then changes what the matcher
serves at random: swaps to rebuilds (ads retargeted, bitmask domains grown where they follow the data, new Bloom
strings), `Matcher.update_ads` (edits, new ads, new strings) and `gtmkit.rebuild_shards` (new SIDs) then a swap.
After each change every request and batch made so far is used as it was made.

Property (docs/design.md §9): with those requests, the post-filter of every leaf, `ad_eligible` and a beam search
wide enough to keep every SID return exactly the ads brute-force eligibility finds in the catalog the matcher
serves; a step and a mask equal the references' for the users encoded by the index serving now, and pass every
child above an eligible ad. Changes with a bitmask value outside the served domain are refused with one line and
leave the version; any other refusal is a wrong answer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .fuzz_core import OK_SAME, REFUSED, Wrong, classify
from .fuzz_fixtures import compare_step
from .fuzz_gen import BITMASK_VALUES, BLOOM_VALUES, random_spec, random_table
from .gtm import catalog_rows, eligible, live_nodes, mask_reference, step_reference

NEW_BITMASK = {"country": ["BR", "IN"], "age": ["65+"], "gender": ["x"]}
NEW_BLOOM = {"location": ["IT:RM", "BR:SP", "US:NY"], "topic": ["d", "e"]}
UNKNOWN = "ZZ"  # a value that no catalog of a case holds
PARTITIONS = ({}, {"partition": "none"}, {"partition": "static", "k": 2},
              {"partition": "dynamic", "target_fill": 0.4, "k_max": 3})


def _spec(rng) -> dict:
    spec = random_spec(rng)
    spec["sid"] = {"column": "sid", "length": int(rng.integers(2, 4)), "vocab": int(rng.integers(3, 6))}
    for a in spec["bitmask"].values():
        if rng.random() < 0.7:
            a["domain"] = None  # the domain follows the data: a rebuild may grow it
    return spec


def _pool(spec: dict, group: str, name: str) -> list:
    """The values a catalog of this case may hold for an attribute."""
    a = spec[group][name]
    if group == "bitmask" and a.get("domain"):
        return list(a["domain"])
    return (BITMASK_VALUES if group == "bitmask" else BLOOM_VALUES)[name] + \
        (NEW_BITMASK if group == "bitmask" else NEW_BLOOM)[name]


def _pick(rng, pool: list, p_none: float, k_max: int):
    if not pool or rng.random() < p_none:
        return None if rng.random() < 0.5 else []
    return [str(x) for x in rng.choice(pool, size=int(rng.integers(1, min(k_max, len(pool)) + 1)), replace=False)]


def _targeting(rng, spec: dict, domains: dict = None) -> dict:
    """column -> allowed or excluded values of one ad; domains: the bitmask values it may use (an update's must
    lie in the served index's domain)."""
    out = {}
    for group in ("bitmask", "bloom"):
        for name, a in spec[group].items():
            pool = domains[name] if group == "bitmask" and domains is not None else _pool(spec, group, name)
            out[a["column"]] = _pick(rng, pool, 0.3, 2)
            if a.get("exclude_column"):
                out[a["exclude_column"]] = _pick(rng, pool, 0.8, 1)
    return out


def _user(rng, spec: dict) -> dict:
    u = {}
    for group, new in (("bitmask", NEW_BITMASK), ("bloom", NEW_BLOOM)):
        for name in spec[group]:
            r = rng.random()
            if r < 0.15:
                continue
            pool = sorted(set(_pool(spec, group, name) + new[name])) + [UNKNOWN]
            vals = [str(x) for x in rng.choice(pool, size=int(rng.integers(1, 4)), replace=False)]
            u[name] = vals[0] if r < 0.5 else vals
    if rng.random() < 0.1:
        u["_trace"] = "metadata"
    return u


class Case:
    """The matcher, the catalog it serves, and every request and batch made so far."""

    def __init__(self, rng, ctx):
        from .. import Matcher
        from ..inputs.schema import parse_schema

        self.rng, self.ctx, self.work = rng, ctx, Path(ctx["work"])
        self.spec = _spec(rng)
        self.schema = parse_schema(self.spec)
        self.L, self.V = self.spec["sid"]["length"], self.spec["sid"]["vocab"]
        self.table = random_table(rng, self.spec, n_ads=int(rng.integers(15, 50)))
        self.log = [f"L={self.L} V={self.V} bitmask {sorted(self.spec['bitmask'])} "
                    f"(domains given: {sorted(n for n, a in self.spec['bitmask'].items() if a.get('domain'))}) "
                    f"bloom {sorted(self.spec['bloom'])}"]
        self.builds = 0
        self.m = Matcher(self._build(self.table))
        self.held = []  # (user, request)
        self.batches = []  # (request numbers in held, batch)
        self.ids = itertools.count(10**6)

    def note(self, what: str) -> None:
        self.log.append(what)
        self.ctx["note"] = "; ".join(self.log)

    def _build(self, table: pa.Table):
        from .. import build_index

        self.builds += 1
        d = self.work / f"v{self.builds}"
        d.mkdir()
        pq.write_table(table, d / "catalog.parquet")
        (d / "catalog.schema.json").write_text(json.dumps(self.spec))
        return build_index(d / "catalog.parquet", d / "index", **PARTITIONS[int(self.rng.integers(len(PARTITIONS)))])

    # --- requests ---------------------------------------------------------------------------
    def encode(self) -> None:
        rng = self.rng
        n = int(rng.integers(1, 4))
        for _ in range(n):
            u = _user(rng, self.spec)
            how = int(rng.integers(3))
            enc = self.m.encode_request if how == 0 else self.m.current().encode_request if how == 1 else \
                self.m.current().index.encode_request
            self.held.append((u, enc(u)))
        made = ""
        if rng.random() < 0.6:
            pick = sorted(int(x) for x in rng.choice(len(self.held), size=int(rng.integers(1, len(self.held) + 1)),
                                                     replace=False))
            self.batches.append((pick, self.m.batch([self.held[i][1] for i in pick])))
            made = f", batch of {len(pick)}"
        self.note(f"encode {n} on {self.m.version}{made}")

    # --- changes ----------------------------------------------------------------------------
    def rebuild(self) -> None:
        """A build of the catalog with ads retargeted, a few dropped and a few added, swapped in."""
        rng = self.rng
        rows = self.table.to_pylist()
        share = float(rng.choice([0.1, 0.3, 0.7]))
        for r in rows:
            if rng.random() < share:
                r.update(_targeting(rng, self.spec))
        drop = int(rng.integers(0, 3)) if len(rows) > 4 else 0
        for i in sorted(rng.choice(len(rows), size=drop, replace=False).tolist(), reverse=True):
            rows.pop(i)
        add = int(rng.integers(0, 4))
        for _ in range(add):
            rows.append({"ad_id": next(self.ids), "sid": [int(x) for x in rng.integers(0, self.V, self.L)],
                         **_targeting(rng, self.spec)})
        table = pa.Table.from_pylist(rows, schema=self.table.schema)
        before = self.m.current().index
        new = self._build(table)
        self.m.swap(new)
        self.table = table
        grew = [n for a, n in enumerate(new.layout.names) if set(new.layout.domains[a]) - set(before.layout.domains[a])]
        self.note(f"rebuild: {share:.0%} retargeted, -{drop} +{add} ads, domains grown {grew}, "
                  f"fingerprint {'kept' if new.fingerprint == before.fingerprint else 'changed'} -> {new.version}")

    def _changes(self, new_sids: int) -> tuple:
        """-> (change table, catalog after it, whether it holds a bitmask value outside the served domain):
        edits (new targeting, now and then another SID of the trie), new ads on the trie's SIDs, and new_sids ads
        on SIDs the trie lacks."""
        rng = self.rng
        idx = self.m.current().index
        rows = self.table.to_pylist()
        have = [idx.leaf_sid(n) for n in range(idx.first_leaf, idx.num_nodes)]
        off = [s for s in itertools.product(range(self.V), repeat=self.L) if s not in set(have)]
        domains = {n: list(idx.layout.domains[a]) for a, n in enumerate(idx.layout.names)}
        out = []
        for i in rng.choice(len(rows), size=int(rng.integers(0, min(4, len(rows)) + 1)), replace=False):
            sid = rows[i]["sid"] if rng.random() < 0.5 else list(have[int(rng.integers(len(have)))])
            out.append({"ad_id": rows[i]["ad_id"], "sid": sid, **_targeting(rng, self.spec, domains)})
        for _ in range(int(rng.integers(0 if out else 1, 4))):
            out.append({"ad_id": next(self.ids), "sid": list(have[int(rng.integers(len(have)))]),
                        **_targeting(rng, self.spec, domains)})
        for _ in range(new_sids if off else 0):
            out.append({"ad_id": next(self.ids), "sid": list(off[int(rng.integers(len(off)))]),
                        **_targeting(rng, self.spec, domains)})
        outside = False
        names = [n for n in self.spec["bitmask"] if set(_pool(self.spec, "bitmask", n)) - set(domains[n])]
        if names and rng.random() < 0.15:  # a value the served index has no bit for
            n = names[int(rng.integers(len(names)))]
            col = self.spec["bitmask"][n]["column"]
            out[int(rng.integers(len(out)))][col] = sorted(set(_pool(self.spec, "bitmask", n)) - set(domains[n]))[:1]
            outside = True
        by_id = {r["ad_id"]: r for r in rows}
        for r in out:
            by_id[r["ad_id"]] = {**by_id.get(r["ad_id"], {}), **r}
        changes = pa.Table.from_pylist(out, schema=self.table.schema)
        return changes, pa.Table.from_pylist(list(by_id.values()), schema=self.table.schema), outside

    def update(self) -> None:
        changes, after, outside = self._changes(0)
        self._apply(f"update_ads of {changes.num_rows}", changes, after, outside,
                    lambda: self.m.update_ads(changes))

    def shards(self) -> None:
        from .. import rebuild_shards

        changes, after, outside = self._changes(int(self.rng.integers(1, 4)))

        def run():
            new, _ = rebuild_shards(self.m.current().index, changes)
            self.m.swap(new)

        self._apply(f"rebuild_shards of {changes.num_rows}", changes, after, outside, run)

    def _apply(self, what: str, changes, after, outside: bool, run) -> None:
        from ..errors import GtmkitError

        before = self.m.version
        strings = sorted({s for b in self.spec["bloom"].values() for c in (b["column"], b.get("exclude_column"))
                          if c for v in changes.column(c).to_pylist() for s in v or []}
                         - {s for d in self.m.current().index.bloom_dictionaries for s in d})
        self.note(f"{what} ({'a value outside the domain, ' if outside else ''}new strings {strings})")
        try:
            run()
        except GtmkitError as exc:
            outcome, detail = classify(exc)
            if outcome != REFUSED:
                raise
            if not outside:
                raise Wrong(f"{what} refused well-formed changes: {detail}") from None
            if self.m.version != before:
                raise Wrong(f"{what} refused the changes but serves {self.m.version}, not {before}")
            self.note("refused")
            return
        if outside:
            raise Wrong(f"{what} accepted a bitmask value outside the served domain")
        self.table = after
        self.note(f"-> {self.m.version}")

    # --- the property -----------------------------------------------------------------------
    def check(self) -> None:
        """Every request and batch held, as it was made, against brute force over the catalog served now."""
        cur = self.m.current()
        idx = cur.index
        rows = catalog_rows(self.table, self.schema)
        users = [u for u, _ in self.held]
        fresh = [idx.encode_request(u) for u in users]
        ok = [[eligible(ad, u, self.schema) for ad in rows] for u in users]
        leaf = [idx.find(ad["sid"]) for ad in rows]
        if min(leaf) < idx.first_leaf:
            raise Wrong(f"{idx.version} lacks the SID of an ad it serves")
        want = [sorted((leaf[i] - idx.first_leaf, ad["ad_id"]) for i, ad in enumerate(rows) if ok[b][i])
                for b in range(len(users))]
        on_path = [{idx.find(ad["sid"][:j]) for i, ad in enumerate(rows) if ok[b][i] for j in range(1, self.L + 1)}
                   for b in range(len(users))]
        live = live_nodes(idx, [ad["sid"] for ad in rows])
        sets = [("requests", list(range(len(self.held))), [r for _, r in self.held])]
        sets += [(f"batch {i}", pick, q) for i, (pick, q) in enumerate(self.batches)]
        for label, pick, q in sets:
            where = f"{label} on {idx.version}"
            for check in CHECKS:
                check(self, idx, q, pick, where, want=want, on_path=on_path, live=live, fresh=fresh, users=users)
        self._eligible(idx, rows, ok, users)

    def _eligible(self, idx, rows, ok, users) -> None:
        ids = np.array([ad["ad_id"] for ad in rows], np.int64)
        for b, (_, r) in enumerate(self.held):
            got = idx.ad_eligible(ids, r)
            if list(map(bool, got)) != ok[b]:
                raise Wrong(f"ad_eligible of request {b} on {idx.version}: {ids[got].tolist()[:10]}, want "
                            f"{ids[np.array(ok[b], bool)].tolist()[:10]} (user {users[b]})")

    def _postfilter(self, idx, q, pick, where, want, users, **_) -> None:
        leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes, dtype=np.int64), (len(pick), 1))
        for j, (ads, rank) in enumerate(self.m.postfilter(leaves, q)):
            got = list(zip(rank.tolist(), ads.tolist()))
            if got != want[pick[j]]:
                raise Wrong(f"post-filter of every leaf, {where}, request {j}: {got[:8]}, want {want[pick[j]][:8]} "
                            f"(user {users[pick[j]]})")

    def _beam_search(self, idx, q, pick, where, want, users, **_) -> None:
        res = self._search(idx, q)
        for j, (ads, _) in enumerate(res.ads):
            w = sorted(a for _, a in want[pick[j]])
            if sorted(ads.tolist()) != w:
                raise Wrong(f"wide beam search, {where}, request {j}: {sorted(ads.tolist())[:8]}, want {w[:8]} "
                            f"(user {users[pick[j]]})")
        if res.version != idx.version:
            raise Wrong(f"beam search answered as {res.version}, the matcher serves {idx.version}")

    def _rows_at(self, idx, B: int) -> tuple:
        """Up to 6 random internal nodes of one random depth per request: (depth, node ids, row_request)."""
        rng = self.rng
        d = int(rng.integers(self.L))
        lo, hi = int(idx.level_offsets[d]), int(idx.level_offsets[d + 1])
        per = min(hi - lo, 6)
        nodes = np.concatenate([rng.choice(np.arange(lo, hi), size=per, replace=False) for _ in range(B)])
        return d, nodes.astype(np.int64), np.repeat(np.arange(B), per)

    def _mask(self, idx, q, pick, where, on_path, live, fresh, **_) -> None:
        d, nodes, rr = self._rows_at(idx, len(pick))
        mask = self.m.mask(nodes, rr, q, True)
        ref = mask_reference(idx, nodes, rr, [fresh[i] for i in pick], True, live)
        if not np.array_equal(mask, ref):
            raise Wrong(f"mask at depth {d}, {where}: {mask.ravel()[:8].tolist()}, "
                        f"reference {ref.ravel()[:8].tolist()}")
        for r, n in enumerate(nodes.tolist()):
            toks, kids = idx.children(n)
            for t, kid in zip(toks.tolist(), kids.tolist()):
                if kid in on_path[pick[rr[r]]] and not (int(mask[r, t // 32]) >> (t % 32)) & 1:
                    raise Wrong(f"mask at depth {d}, {where}: prunes node {kid}, above an eligible ad")

    def _step(self, idx, q, pick, where, on_path, live, fresh, **_) -> None:
        rng = self.rng
        d, nodes, rr = self._rows_at(idx, len(pick))
        sub = [fresh[i] for i in pick]
        lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
        bs = np.round(rng.normal(size=len(nodes)), 1).astype(np.float32)
        every = len(nodes) * idx.vocab_size  # k holding every candidate: each child above an eligible ad is one
        for k in (int(rng.integers(1, 4)), every):
            st = self.m.step(nodes, lp, bs, rr, q, k, gtm=True, count_candidates=True)
            compare_step(st, step_reference(idx, nodes, lp, bs, rr, sub, k, True, live), f"at depth {d}, {where}")
        for r, n in enumerate(nodes.tolist()):
            b = int(rr[r])
            for kid in idx.children(n)[1].tolist():
                if kid in on_path[pick[b]] and kid not in set(st.nodes[b].tolist()):
                    raise Wrong(f"step at depth {d}, {where}: prunes node {kid}, above an eligible ad")

    def _search(self, idx, q):
        from .. import beam_search

        rng = self.rng
        V = idx.vocab_size
        wide = (1,) + (max(idx.num_sids, 1),) * (self.L - 1)  # every SID kept: the answer is the eligible ads

        def logits(t, prev, parents):
            return np.round(rng.normal(size=(len(prev), V)), 1).astype(np.float32)

        return beam_search(self.m, q, logits, wide)


CHECKS = (Case._postfilter, Case._beam_search, Case._mask, Case._step)


def case(rng, ctx) -> str:
    c = Case(rng, ctx)
    c.note(f"built {c.m.version}")
    for _ in range(int(rng.integers(2, 6))):
        c.encode()
        changes = [c.rebuild, c.update] + ([c.shards] if "+" not in c.m.version else [])
        changes[int(rng.integers(len(changes)))]()
        c.check()
    return OK_SAME
