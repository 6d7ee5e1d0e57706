"""gtmkit.synth: determinism, catalog shape (docs/design.md §7), targeting/cluster correlation, users, CLI."""

import json
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gtmkit import synth
from gtmkit.commands.synth import command
from gtmkit.errors import GtmkitError

LIST_COLS = ["country", "country_exclude", "age", "gender", "location", "location_exclude"]


@pytest.fixture(scope="module")
def big():
    """200k ads (about 120k SIDs) as a table, its schema and plain Python columns."""
    table = synth.synth_catalog(200_000, seed=3)
    schema = synth.catalog_schema(200_000, seed=3)
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    return table, schema, cols


@pytest.fixture(scope="module")
def world():
    return synth.World(0)


def _sid_keys(table, vocab=512):
    toks = np.asarray(table.column("sid").combine_chunks().flatten()).reshape(table.num_rows, -1).astype(np.int64)
    keys = np.zeros(len(toks), np.int64)
    for j in range(toks.shape[1]):
        keys = keys * vocab + toks[:, j]
    return toks, keys


# ---------------------------------------------------------------------------------------------- files

def test_write_catalog_byte_identical(tmp_path):
    a = synth.write_catalog(tmp_path / "a" / "cat.parquet", 5000, seed=11)
    b = synth.write_catalog(tmp_path / "b" / "cat.parquet", 5000, seed=11)
    c = synth.write_catalog(tmp_path / "c" / "cat.parquet", 5000, seed=12)
    assert a[1].endswith("cat.schema.json") and b[1] == str(tmp_path / "b" / "cat.schema.json")
    for x, y in zip(a, b):
        assert open(x, "rb").read() == open(y, "rb").read()
    assert open(a[0], "rb").read() != open(c[0], "rb").read()
    assert open(a[1], "rb").read() != open(c[1], "rb").read()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["cat.parquet", "cat.schema.json"]  # no temp files
    # what was written is what synth_catalog returns, and the schema file is sorted-key JSON
    assert pq.read_table(a[0]).equals(synth.synth_catalog(5000, seed=11))
    text = open(a[1]).read()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert json.loads(text) == synth.catalog_schema(5000, seed=11)


def test_world_seed_changes_targeting_not_sids():
    a = synth.synth_catalog(3000, seed=1, world_seed=0)
    b = synth.synth_catalog(3000, seed=1, world_seed=1)
    assert a.column("sid").equals(b.column("sid")) and a.column("ad_id").equals(b.column("ad_id"))
    assert not a.column("country").equals(b.column("country"))


def test_schema_structure(big):
    _, schema, _ = big
    assert set(schema) == {"ad_id", "sid", "bitmask", "bloom", "meta"}
    assert schema["ad_id"] == "ad_id"
    assert schema["sid"] == {"column": "sid", "length": 4, "vocab": 512}
    bm = schema["bitmask"]
    assert bm["country"]["column"] == "country" and bm["country"]["exclude_column"] == "country_exclude"
    dom = bm["country"]["domain"]
    assert dom == sorted(dom) and len(set(dom)) == len(dom) == 250
    assert all(len(c) == 2 and c.isalpha() and c.isupper() for c in dom)
    assert {"US", "GB", "DE", "FR", "IN", "BR", "JP"} <= set(dom)
    assert bm["age"] == {"column": "age", "domain": ["13-17", "18-24", "25-34", "35-44", "45-54", "55-64", "65+"]}
    assert bm["gender"] == {"column": "gender", "domain": ["f", "m", "x"]}
    assert schema["bloom"] == {"location": {"column": "location", "exclude_column": "location_exclude",
                                            "bits": 256, "hashes": 3, "seed": 0}}
    meta = schema["meta"]
    assert meta["generator"] == "gtmkit synth catalog"
    assert (meta["ads"], meta["seed"], meta["world_seed"], meta["vocab"], meta["sid_length"]) == (200_000, 3, 0, 512, 4)
    assert meta["untargeted_country"] == 0.30 and meta["location_exclusion_rate"] == 0.03
    assert meta["sid_coherence"] == 0.5


def test_schema_accepted_by_schema_parser(big):
    try:
        from gtmkit.inputs.schema import parse_schema
    except ImportError:  # pragma: no cover - written by another module
        pytest.skip("gtmkit.inputs.schema not available")
    s = parse_schema(big[1])
    assert s.sid_length == 4 and s.vocab == 512 and len(s.bitmask) == 3 and len(s.bloom) == 1


# ---------------------------------------------------------------------------------------------- shape

def test_columns_and_types(big):
    table, _, cols = big
    assert table.schema.equals(synth.ARROW_SCHEMA)
    assert table.schema.field("ad_id").type == pa.int64()
    assert table.schema.field("sid").type == pa.list_(pa.int32())
    for c in LIST_COLS:
        assert table.schema.field(c).type == pa.list_(pa.string())
    assert table.num_rows == 200_000
    ids = np.asarray(table.column("ad_id"))
    assert len(np.unique(ids)) == len(ids)
    assert not np.all(np.diff(ids) > 0)  # not a plain range
    toks, _ = _sid_keys(table)
    assert toks.shape == (200_000, 4) and toks.min() >= 0 and toks.max() < 512
    assert table.column("sid").null_count == 0 and table.column("ad_id").null_count == 0


def test_ads_per_sid_shape(big):
    table, schema, _ = big
    toks, keys = _sid_keys(table)
    _, counts = np.unique(keys, return_counts=True)
    expect = 200_000 / synth._ADS_PER_SID_MEAN
    assert abs(len(counts) - expect) < 0.03 * expect
    assert 1.45 <= counts.mean() <= 1.7
    q = synth.ads_per_sid_stats(counts)
    assert q["p50"] == 1 and q["p90"] == 2 and 8 <= q["p99"] <= 14
    meta = schema["meta"]
    assert meta["sids"] == len(counts) and meta["ads_per_sid"] == q
    # Zipf first token: every token used, the hottest far above the median
    first = np.bincount(toks[:, 0], minlength=512)
    assert (first > 0).sum() >= 500 and first.max() > 4 * np.median(first)
    # depth-3 prefixes hold few SIDs, depth-2 prefixes many
    sids = np.unique(keys)
    _, per3 = np.unique(sids // 512, return_counts=True)
    assert 1.0 < per3.mean() < 2.5


def test_sids_distinct_and_exact_count():
    for n, vocab, length in [(3000, 70_000, 4), (500, 8, 4), (40, 64, 1), (2000, 512, 2)]:
        t = synth.synth_catalog(n, seed=2, vocab=vocab, sid_length=length)
        toks = np.asarray(t.column("sid").combine_chunks().flatten()).reshape(n, length)
        assert toks.max() < vocab
        sch = synth.catalog_schema(n, seed=2, vocab=vocab, sid_length=length)
        assert len({tuple(r) for r in toks.tolist()}) == sch["meta"]["sids"]
    with pytest.raises(GtmkitError, match="distinct SIDs"):
        synth.synth_catalog(5000, vocab=8, sid_length=2)


def test_bad_arguments():
    with pytest.raises(GtmkitError, match="n_ads"):
        synth.synth_catalog(0)
    with pytest.raises(GtmkitError, match="unknown synth knob"):
        synth.synth_catalog(10, untargeted_colour=0.5)
    with pytest.raises(GtmkitError, match=r"\[0, 1\]"):
        synth.synth_catalog(10, untargeted_age=1.5)


# ---------------------------------------------------------------------------------------------- world

def test_world(world):
    assert world.countries[0] == "US" and len(world.countries) == 250 == len(set(world.countries))
    assert np.all(np.diff(world.country_weights) < 0)
    locs = world.location_strings
    assert len(set(locs)) == len(locs) == world.n_countries + world.n_regions + world.n_cities
    n_reg = np.diff(world.region_offsets)
    n_city = np.diff(world.city_offsets)
    assert n_reg.min() >= 2 and n_reg.max() <= 50 and n_reg[0] == 50
    assert n_city.min() >= 1 and n_city.max() <= 40
    for r in range(0, world.n_regions, 97):
        assert locs[world.region_base + r].startswith(locs[world.region_country[r]] + ":R")
    for k in range(0, world.n_cities, 997):
        assert locs[world.city_base + k].startswith(locs[world.region_base + world.city_region[k]] + ":C")
    assert synth.World(0).location_strings == locs and synth.World(1).countries != world.countries
    # every place can be drawn
    u = (np.arange(1 << 16) + 0.5) / (1 << 16)
    assert len(np.unique(world.draw_countries(u))) == 250


def test_cluster_profiles(world):
    cl = world.clusters(512)
    assert cl.homes.shape == (512, synth.MAX_HOMES) and cl.n_homes.min() >= 1 and cl.n_homes.max() <= 8
    for t in range(0, 512, 37):
        h = cl.homes[t, :cl.n_homes[t]]
        assert len(set(h.tolist())) == len(h) and (h >= 0).all() and (cl.homes[t, cl.n_homes[t]:] == -1).all()
        for j, c in enumerate(h):
            assert (world.region_country[cl.home_regions[t, j]] == c).all()
    # a cluster's profile depends only on (seed, t1), not on the vocab
    small = synth.World(0).clusters(64)
    for arr, arr_small in zip(cl, small):
        assert np.array_equal(arr[:64], arr_small)


# ---------------------------------------------------------------------------------------------- targeting

def test_untargeted_exclusions_and_rates(big):
    table, _, cols = big
    n = table.num_rows
    for c in ["country", "age", "gender", "location"]:
        vals = cols[c]
        nulls = sum(v is None for v in vals)
        empties = sum(v == [] for v in vals)
        assert nulls > 0 and empties > 0 and empties > nulls
        share = (nulls + empties) / n
        rate = {"country": 0.30, "age": 0.55, "gender": 0.65, "location": 0.70}[c]
        assert abs(share - rate) < 0.02, (c, share)
    excl = [i for i, v in enumerate(cols["country_exclude"]) if v]
    assert 0.5 * 0.015 * n < len(excl) < 1.5 * 0.015 * n
    assert all(not cols["country"][i] for i in excl)  # exclusions only on untargeted-country ads
    lexcl = [i for i, v in enumerate(cols["location_exclude"]) if v]
    assert 0.02 * n < len(lexcl) < 0.035 * n
    for i in lexcl[:2000]:
        (x,) = cols["location_exclude"][i]
        assert x.count(":") in (1, 2) and x not in (cols["location"][i] or [])


def test_values_inside_world(big, world):
    _, schema, cols = big
    dom = set(schema["bitmask"]["country"]["domain"])
    locs = set(world.location_strings)
    for i in range(0, 200_000, 7):
        cs = cols["country"][i] or []
        assert set(cs) <= dom and len(set(cs)) == len(cs) <= 5
        ages = cols["age"][i] or []
        idx = [synth.AGE_BUCKETS.index(a) for a in ages]
        assert idx == list(range(idx[0], idx[0] + len(idx))) if idx else True  # contiguous range
        assert len(cols["gender"][i] or []) <= 1
        ls = cols["location"][i] or []
        assert len(set(ls)) == len(ls) <= 3 and set(ls) <= locs
        if cs:  # locations lie inside the targeted countries
            assert all(s.split(":")[0] in cs for s in ls)


def test_targeting_follows_sid_clusters(big):
    table, _, cols = big
    toks, _ = _sid_keys(table)
    by_t1 = defaultdict(list)
    for i, cs in enumerate(cols["country"]):
        if cs:
            by_t1[int(toks[i, 0])].append(set(cs))
    rng = np.random.default_rng(0)
    same = rand = 0
    groups = [g for g in by_t1.values() if len(g) >= 2]
    flat = [s for g in groups for s in g]
    for _ in range(4000):
        g = groups[rng.integers(len(groups))]
        a, b = rng.choice(len(g), 2, replace=False)
        same += bool(g[a] & g[b])
        a, b = rng.integers(len(flat), size=2)
        rand += bool(flat[a] & flat[b])
    assert same > 2 * rand, (same, rand)
    # ages too: the mean targeted age bucket varies by cluster far more than by chance
    means = []
    for t in range(20):
        rows = np.flatnonzero(toks[:, 0] == t)
        vals = [synth.AGE_BUCKETS.index(a) for i in rows for a in (cols["age"][i] or [])]
        means.append(np.mean(vals))
    assert np.std(means) > 0.4


def test_knobs_change_rates():
    t = synth.synth_catalog(4000, seed=5, untargeted_country=0.0, untargeted_gender=1.0, null_rate=0.0)
    assert all(t.column("country").to_pylist())
    assert t.column("gender").null_count == 0 and not any(t.column("gender").to_pylist())


def test_sid_coherence():
    """Ads of a multi-ad SID copy one leader targeting draw per SID with probability sid_coherence."""
    n, seed = 60_000, 8
    tabs = {c: synth.synth_catalog(n, seed=seed, sid_coherence=c) for c in (0.0, 0.5, 1.0)}
    assert all(t.column("sid").equals(tabs[0.0].column("sid")) for t in tabs.values())
    _, keys = _sid_keys(tabs[0.0])
    _, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)
    multi = counts[inv] > 1
    rows = {c: list(zip(*(t.column(col).to_pylist() for col in LIST_COLS))) for c, t in tabs.items()}
    # 1.0: every ad of a SID has the same targeting (nulls included); single-ad SIDs keep their own draw
    first = {}
    for i, k in enumerate(inv.tolist()):
        assert rows[1.0][first.setdefault(k, i)] == rows[1.0][i]
    single = np.flatnonzero(~multi)
    assert all(rows[1.0][i] == rows[0.0][i] for i in single)
    # 0.0: ads of a SID are independent draws (today's behaviour), rarely identical to the SID's first ad
    same0 = sum(rows[0.0][first[k]] == rows[0.0][i] for i, k in enumerate(inv.tolist()) if multi[i] and first[k] != i)
    pairs = sum(1 for i, k in enumerate(inv.tolist()) if multi[i] and first[k] != i)
    assert pairs > 1000 and same0 < 0.2 * pairs
    # 0.5: each ad keeps its own draw (the 0.0 row) or takes the leader (the 1.0 row), about half the time
    own = lead = 0
    for i in np.flatnonzero(multi):
        a, b = rows[0.5][i] == rows[0.0][i], rows[0.5][i] == rows[1.0][i]
        assert a or b
        own += a and not b
        lead += b and not a
    assert 0.4 < lead / (own + lead) < 0.6
    # the leader is drawn like any ad of its cluster: the untargeted shares do not move
    for c in (0.0, 1.0):
        share = sum(not r[0] for r in rows[c]) / n
        assert abs(share - 0.30) < 0.02, (c, share)
    # a knob like the others: schema meta, determinism
    assert synth.catalog_schema(n, seed=seed, sid_coherence=1.0)["meta"]["sid_coherence"] == 1.0
    assert tabs[0.5].equals(synth.synth_catalog(n, seed=seed, sid_coherence=0.5))
    assert tabs[0.5].equals(synth.synth_catalog(n, seed=seed))  # the default


# ---------------------------------------------------------------------------------------------- users

def test_users(big, world):
    _, schema, _ = big
    a = synth.synth_users(schema, 3000, seed=9)
    assert a == synth.synth_users(schema, 3000, seed=9) and a != synth.synth_users(schema, 3000, seed=10)
    dom = set(schema["bitmask"]["country"]["domain"])
    cl = world.clusters(512)
    no_gender = at_home = 0
    for u in a:
        assert set(u) <= {"country", "age", "gender", "location", "_interests"}
        assert u["country"] in dom and u["age"] in synth.AGE_BUCKETS
        no_gender += "gender" not in u
        assert u.get("gender", "f") in synth.GENDERS
        c, r, k = u["location"]
        assert c == u["country"] and r.startswith(c + ":R") and k.startswith(r + ":C")
        ints = u["_interests"]
        assert 1 <= len(ints) <= 5 and len(set(ints)) == len(ints) and all(0 <= t < 512 for t in ints)
        ci = world.countries.index(u["country"])
        at_home += all(ci in cl.homes[t].tolist() for t in ints)
    assert 0.06 < no_gender / len(a) < 0.14
    assert at_home / len(a) > 0.9
    assert synth.synth_users(schema, 0) == []


def test_users_need_synth_meta(big):
    schema = dict(big[1])
    schema.pop("meta")
    with pytest.raises(GtmkitError, match="synth metadata"):
        synth.synth_users(schema, 3)
    with pytest.raises(GtmkitError, match="synth metadata"):
        synth.synth_users({**schema, "meta": {"generator": "someone else"}}, 3)


def test_write_users(tmp_path, big):
    import io

    users = synth.synth_users(big[1], 5, seed=1)
    buf = io.StringIO()
    assert synth.write_users(buf, users) == 5
    p = tmp_path / "u.jsonl"
    synth.write_users(p, users)
    assert p.read_text() == buf.getvalue()
    assert [json.loads(line) for line in p.read_text().splitlines()] == users


# ---------------------------------------------------------------------------------------------- CLI

def test_cli_catalog(tmp_path):
    r = CliRunner()
    out = tmp_path / "c.parquet"
    res = r.invoke(command, ["catalog", "--ads", "3000", "--seed", "4", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["ads"] == 3000 and info["catalog"] == str(out) and info["schema"] == str(tmp_path / "c.schema.json")
    assert info["ads_per_sid"]["p50"] == 1 and info["sids"] == json.load(open(info["schema"]))["meta"]["sids"]
    assert pq.read_table(out).num_rows == 3000

    res = r.invoke(command, ["catalog", "--ads", "2000", "--untargeted-country", "0", "--null-rate", "0", "-s",
                             "-o", str(tmp_path / "d.parquet")])
    assert res.exit_code == 0, res.output
    assert "2000 ads" in res.stdout and "p50/p90/p99" in res.stdout
    assert all(pq.read_table(tmp_path / "d.parquet").column("country").to_pylist())

    res = r.invoke(command, ["catalog", "--ads", "0", "-o", str(tmp_path / "e.parquet")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    res = r.invoke(command, ["catalog", "--ads", "5000", "--vocab", "8", "--sid-length", "2", "-o",
                             str(tmp_path / "e.parquet")])
    assert res.exit_code == 1 and "Error:" in res.output and "distinct SIDs" in res.output
    assert not (tmp_path / "e.parquet").exists()


def test_cli_users(tmp_path):
    r = CliRunner()
    _, schema_path = synth.write_catalog(tmp_path / "c.parquet", 2000, seed=1)
    res = r.invoke(command, ["users", "--schema", schema_path, "-n", "4", "--seed", "2"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert lines == synth.synth_users(json.load(open(schema_path)), 4, seed=2)

    idx = tmp_path / "index"
    idx.mkdir()
    (idx / "manifest.json").write_text(json.dumps({"format": "x", "schema": json.load(open(schema_path))}))
    out = tmp_path / "u.jsonl"
    res = r.invoke(command, ["users", "--index", str(idx), "-n", "4", "--seed", "2", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["count"] == 4
    assert [json.loads(x) for x in out.read_text().splitlines()] == lines

    for args, msg in [(["--index", str(tmp_path / "nope")], "manifest.json"),
                      (["--schema", str(tmp_path / "c.parquet")], "not UTF-8 text"),
                      ([], "exactly one"),
                      (["--index", str(idx), "--schema", schema_path], "exactly one")]:
        res = r.invoke(command, ["users", *args, "-n", "2"])
        assert res.exit_code != 0 and msg in res.output and "Traceback" not in res.output
    (idx / "manifest.json").write_text("{}")
    res = r.invoke(command, ["users", "--index", str(idx)])
    assert res.exit_code == 1 and "no 'schema'" in res.output
    (tmp_path / "plain.json").write_text(json.dumps({"sid": {"length": 4, "vocab": 512}}))
    res = r.invoke(command, ["users", "--schema", str(tmp_path / "plain.json")])
    assert res.exit_code == 1 and "synth metadata" in res.output


def test_cli_help_has_examples():
    r = CliRunner()
    for args in [[], ["catalog"], ["users"]]:
        res = r.invoke(command, [*args, "--help"])
        assert res.exit_code == 0 and "Example:" in res.output
    out = r.invoke(command, ["catalog", "--help"]).output
    assert "--untargeted-country" in out and "--sid-coherence" in out
