"""The GPU trie search without a GPU: kernels/trie_search.cu, driven by trie/search_cuda.py as on the
device, runs on the CPU through the CUDA emulation of tests/support/cuda_emu.py and must equal the CPU search
exactly. Configurations shrink the block and shared-memory sizes so that the radix select, the sort in
global memory, the global work offsets and the host-prepared rows all run on small inputs."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from gtmkit.trie.search import TrieBeamStepper, trie_beam_search
from gtmkit.trie.search_cuda import KERNEL_FILE, TrieBeamStepperCuda, trie_beam_search_cuda
from gtmkit.errors import GtmkitError
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.testing.trie import RefTrie

from support.cuda_emu import build_emulator, garbage, kernel_signatures, launch
from support.trie_cases import check_reference, hostile_case
from support.tries import layout_trie, random_logp, random_settings, random_tokens, random_trie

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

# the kernels' trie navigation, callable on its own (device functions are plain functions here)
NAV = r"""
extern "C" void emu_nav(const long long* TP, long long n, long long* z, long long* label, long long* key,
                        long long* nz, long long* pz, long long* pnz) {
    Trie t = load_trie(TP);
    for (long long v = 0; v < n; ++v) {
        z[v] = select0(t, v);
        label[v] = v ? label_of(t, v) : -1;
        key[v] = get_bit(t.term, v) ? rank1(t.term, t.term_rank, v) : -1;
        nz[v] = run_end(t, z[v], v);
        pz[v] = zero_pair(t, v, &pnz[v]);
    }
}
// block_select alone, one block: the m-th largest of n distinct keys
static void emu_select_body(const u64* a, unsigned n, unsigned m, u64* out) {
    unsigned char* raw = emu_dyn_smem();
    Smem s;
    s.sel = (u64*)raw;
    s.hist = (u32*)(s.sel + SEL_CAP);
    s.warp = s.hist + 256;
    s.misc = s.warp + 33;
    s.sort = nullptr;
    const u64 r = block_select(a, n, m, s);
    if (threadIdx.x == 0) *out = r;
}
extern "C" void emu_select(const u64* a, unsigned n, unsigned m, u64* out) {
    emu_launch(1, 1, NT, 1, 8 * SEL_CAP + 4 * 298, [=] { emu_select_body(a, n, m, out); });
}
"""


class _Done:
    def synchronize(self):
        pass


class EmuDevice:
    """search_cuda.CupyDevice's methods over NumPy arrays and the emulated kernels."""

    synchronous = True  # a launch runs to its end (TrieSearchServer launches once a request)

    def __init__(self, lib, sigs, cfg, work=None):
        self.lib, self.sigs = lib, sigs
        self._libs, self._work = {(): (lib, sigs)}, work  # label layout (trie_layout) -> the kernels built for it
        self.nt, self.sort_cap = cfg["NT"], cfg["SORT_CAP"]
        self.prep_cap, self.beam_cap, self.cl = cfg["PREP_CAP"], cfg["BEAM_CAP"], cfg["CL"]
        self.tok_cap, self.sel_cap = cfg["TOK_CAP"], cfg["SEL_CAP"]
        self.cfg = cfg
        self.key = ("emu",) + tuple(sorted(cfg.items()))
        self.buffers = {}
        self.launches = []
        self.rng = np.random.default_rng(0)

    def empty(self, shape, dtype):
        return garbage(shape, dtype, self.rng)

    def asarray(self, a):
        return np.array(a, copy=True)

    def ptr(self, a):
        return a.ctypes.data

    def pinned(self, nbytes):
        return np.empty(nbytes, np.uint8)

    def is_device_array(self, a):
        return False

    def to_host(self, a):
        return a

    def order(self, buf):
        pass

    def copy_in(self, dst, host, nbytes):
        assert dst.flags.c_contiguous and nbytes <= dst.nbytes and nbytes <= host.nbytes
        ctypes.memmove(dst.ctypes.data, host.ctypes.data, nbytes)

    def mark(self, done=None):
        return _Done()

    def upload(self, dst, host, nbytes, done=None):
        self.copy_in(dst, host, nbytes)
        return self.mark(done)

    def replay(self, graphs, key, submit):  # as a graph would: the first call's submit, run again
        graphs.setdefault(key, submit)()

    def host_ptr(self, a):
        return a

    null = None

    def built(self, layout=()):
        """(library, signatures) of the kernels compiled for a trie label layout, as CupyDevice.kernel does."""
        if layout not in self._libs:
            defines = dict(self.cfg, **dict(d.split("=") for d in layout))
            work = self._work / "_".join(layout)
            work.mkdir()
            self._libs[layout] = build_emulator(work, KERNEL_FILE, defines, NAV)
        return self._libs[layout]

    def launch(self, name, grid, args, smem=0, layout=()):
        self.launches.append(name)
        cl = self.cl if name in ("search_kernel", "serve_kernel") else 1
        lib, sigs = self.built(layout)
        launch(lib, sigs, name, grid, self.nt, args, cluster=cl, smem=smem)


CONFIGS = {
    # production shared-memory sizes, 4 warps, clusters of 3 blocks a query
    "wide": dict(GTMKIT_EMU=1, NT=128, SORT_CAP=2048, PREP_CAP=4096, BEAM_CAP=1024, TOK_CAP=4096, SEL_CAP=4096, CL=3),
    # one warp, tiny shared memory: radix select, global sort scratch and per-beam data, host-prepared
    # rows; clusters of 2
    "tiny": dict(GTMKIT_EMU=1, NT=32, SORT_CAP=64, PREP_CAP=64, BEAM_CAP=7, TOK_CAP=48, SEL_CAP=16, CL=2),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def emu(request, tmp_path_factory):
    cfg = CONFIGS[request.param]
    work = tmp_path_factory.mktemp("emu_" + request.param)
    lib, sigs = build_emulator(work, KERNEL_FILE, cfg, NAV)
    return EmuDevice(lib, sigs, cfg, work)


def assert_equal(got, want):
    assert np.array_equal(got[0], want[0]), (got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-5)
    assert np.array_equal(np.isneginf(got[1]), np.isneginf(want[1]))


@pytest.mark.parametrize("share", [8, 10**9])
def test_navigation_equals_numba(emu, share, monkeypatch):
    """select0, run ends (children), labels and key ids of the kernels at every node of a synthetic trie;
    zero_pair (sampled zero positions) gives the same child ranges, with every wide group listed (share 8)
    and with none listed (the general path)."""
    from gtmkit import _rank_select as bits
    from gtmkit.trie import nav as nav
    from gtmkit.trie import gpu_tables as aux
    from gtmkit.trie.search_cuda import _trie_params
    from gtmkit.synth.keys import synth_keys
    monkeypatch.setattr(aux, "WIDE_SHARE", share)
    trie = SuccinctTrie.build(synth_keys(20000, seed=7, vocab=3_000_000))
    a, n = trie.arrays, trie.num_nodes
    tp = _trie_params(emu, trie, "test")
    samples, wide = aux.zero_samples(a.louds, 2 * n + 1, aux.ZERO_SHIFT, 10**9)
    listed = int((trie._cuda_trie[emu.key][0]["zpos"] < 0).sum())
    assert listed == (len(wide) if share == 8 else 0) and len(wide) >= 3
    z, label, key, nz, pz, pnz = (np.empty(n, np.int64) for _ in range(6))
    p = [ctypes.c_void_p(x.ctypes.data) for x in (tp.table, z, label, key, nz, pz, pnz)]
    emu.built(tp.layout)[0].emu_nav(p[0], ctypes.c_longlong(n), *p[1:])
    want_z = np.array([bits.select0(a.louds, a.louds_rank, a.louds_select0, v) for v in range(n)])
    assert np.array_equal(z, want_z)
    deg = np.array([nav.child_range(a, v)[1] - nav.child_range(a, v)[0] for v in range(n)])
    assert np.array_equal(nz - z - 1, deg)
    assert np.array_equal(pz, z) and np.array_equal(pnz, nz)
    assert deg.max() > 128 and np.any((deg > 0) & (deg < 64))  # runs past two words (select path) and short ones
    assert np.array_equal(label[1:], nav.labels_of(a, np.arange(1, n)))
    assert label.max() >= 65536
    terminal = np.array([nav.is_terminal(a, v) for v in range(n)])
    assert np.array_equal(key[terminal], np.arange(trie.num_keys)) and np.all(key[~terminal] == -1)


def test_root_directory_and_zero_samples():
    from gtmkit import _rank_select as bits
    from gtmkit.trie.gpu_tables import root_directory, zero_positions, zero_samples
    from gtmkit.synth.keys import synth_keys
    trie = SuccinctTrie.build(synth_keys(5000, seed=3, vocab=100_000))
    a = trie.arrays
    labels, kids = trie.children(0)
    rb, rr, nbits = root_directory(a)
    assert nbits == labels[-1] + 1
    for tok in np.unique(np.concatenate([labels, np.arange(0, nbits + 70, 97)])):
        on = tok < nbits and bool((int(rb[tok >> 6]) >> int(tok & 63)) & 1)
        assert on == (tok in set(labels.tolist()))
        if on:
            below = int(rr[tok >> 6]) + bin(int(rb[tok >> 6]) & ((1 << int(tok & 63)) - 1)).count("1")
            assert kids[below] == trie.find_child(0, int(tok))
    n_zeros = trie.num_nodes + 1
    zp = zero_positions(a.louds, 2 * trie.num_nodes + 1, 3)
    assert zp.tolist() == [bits.select0(a.louds, a.louds_rank, a.louds_select0, 8 * j) for j in range((n_zeros + 7) // 8)]
    # wide groups (2 here): their samples point at lists of their 9 zeros (nbits past the last), at most max_wide
    for max_wide in (10**9, 1):
        samples, wide = zero_samples(a.louds, 2 * trie.num_nodes + 1, 3, max_wide)
        marked = np.flatnonzero(samples < 0)
        assert len(marked) == len(wide) and (max_wide == 1) == (len(wide) == 1) and len(wide) >= 1
        assert np.array_equal(samples[samples >= 0], zp[samples >= 0])
        assert np.array_equal(-1 - samples[marked], np.arange(len(marked)))
        for j, row in zip(marked, wide):
            want = [bits.select0(a.louds, a.louds_rank, a.louds_select0, 8 * j + c) if 8 * j + c < n_zeros
                    else 2 * trie.num_nodes + 1 for c in range(9)]
            assert row.tolist() == want
    # the groups not listed are exactly those whose 9 zeros lie in the four words from the sample
    samples, _ = zero_samples(a.louds, 2 * trie.num_nodes + 1, 3, 10**9)
    for j in np.flatnonzero(samples >= 0):
        last = bits.select0(a.louds, a.louds_rank, a.louds_select0, min(8 * j + 8, n_zeros - 1))
        assert last < 64 * ((zp[j] >> 6) + 4)


def test_signatures_parsed():
    sigs = kernel_signatures(KERNEL_FILE.read_text())
    assert sigs["prep_kernel"][0] == "const int*" and sigs["search_kernel"][5] == "int"


@pytest.mark.parametrize("seed", range(12))
def test_nar_equals_cpu_on_random_tries(emu, seed):
    rng = np.random.default_rng(seed)
    trie, _ = random_trie(rng, int(rng.integers(1, 60)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 12))
    theta_tok, theta_sent, alpha = random_settings(rng, seed)
    tokens, logp = random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0)
    if seed % 6 == 4:  # zeros of both signs tie
        logp = rng.choice(np.float32([0.0, -0.0, -0.5]), size=(b, T, K))
    if seed % 4 == 3:
        tokens = tokens.astype(np.int32)  # the no-conversion path
    want = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
    got = trie_beam_search_cuda(trie, tokens, logp, bw, theta_tok, theta_sent, alpha, device=emu)
    assert_equal(got, want)


def wide_trie(rng, n_keys, vocab):
    """Keys over a large vocabulary with labels >= 65536: wide nodes, many candidates per step."""
    keys = {tuple(int(x) for x in rng.choice(vocab, size=rng.integers(1, 5))) for _ in range(n_keys)}
    return SuccinctTrie.build([list(k) for k in sorted(keys)])




@pytest.mark.parametrize("seed", range(6))
def test_equals_python_reference(emu, seed):
    """The kernels against the plain-Python reference directly (not only through the CPU search): NAR and AR,
    thresholds, length normalisation, ties, labels >= 65536 and 2^31 - 1; same keys, scores within 1e-5."""
    rng = np.random.default_rng(500 + seed)
    trie, ref = random_trie(rng, int(rng.integers(1, 60)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 8))
    settings = random_settings(rng, seed)
    nar = random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0)
    ar = random_tokens(rng, (T, b, bw, K)), random_logp(rng, (T, b, bw, K), seed % 2 == 1)
    check_reference(emu, trie, ref, nar, ar, bw, settings)






@pytest.mark.parametrize("seed", range(4))
def test_hostile_proposals_equal_python_reference(emu, seed):
    """NAR and AR on non-finite and overflowing log-probs and tokens that are not children (support/trie_cases.py hostile), with
    every threshold and normalisation setting: the reference's keys and scores (+inf ones included)."""
    trie, ref, nar, ar, bw, settings = hostile_case(seed)
    check_reference(emu, trie, ref, nar, ar, bw, settings)
    want = trie_beam_search(trie, *nar, bw, *settings)
    assert_equal(trie_beam_search_cuda(trie, *nar, bw, *settings, device=emu), want)


@pytest.mark.parametrize("seed", range(2))
def test_nar_many_candidates(emu, seed):
    """More candidates than SORT_CAP in the tiny configuration, BW above and below their number."""
    rng = np.random.default_rng(100 + seed)
    vocab = np.concatenate([np.arange(12), 65536 + np.arange(12), [2**31 - 1]])
    trie = wide_trie(rng, 1500, vocab)
    b, T, K = 2, 4, 25
    tokens = np.stack([np.stack([rng.permutation(vocab)[:K] for _ in range(T)]) for _ in range(b)]).astype(np.int64)
    logp = random_logp(rng, (b, T, K), ties=seed % 2 == 0)
    for bw in (3, 70, 300):
        want = trie_beam_search(trie, tokens, logp, bw, alpha=0.5)
        got = trie_beam_search_cuda(trie, tokens, logp, bw, alpha=0.5, device=emu)
        assert_equal(got, want)


def test_nar_long_rows_prepared_on_host(emu):
    """K above PREP_CAP (tiny configuration): rows prepared by numba on the host, uploaded prepared."""
    rng = np.random.default_rng(5)
    trie, _ = random_trie(rng, 40)
    tokens, logp = random_tokens(rng, (2, 3, 70)), random_logp(rng, (2, 3, 70), True)
    want = trie_beam_search(trie, tokens, logp, 5, theta_tok=-1.2)
    got = trie_beam_search_cuda(trie, tokens, logp, 5, theta_tok=-1.2, device=emu)
    assert_equal(got, want)


def test_nar_rows_longer_than_a_block(emu):
    """K distinct proposals, above the block's threads and within TOK_CAP: the kernel copies the step's row
    to shared memory in more than one pass; K above TOK_CAP (tiny configuration): the row is searched in
    global memory."""
    rng = np.random.default_rng(9)
    vocab = np.concatenate([np.arange(150), 65536 + np.arange(150)])
    trie = wide_trie(rng, 600, vocab)
    ks = [min(emu.nt + emu.nt // 2, emu.tok_cap)] + ([emu.tok_cap + 1] if emu.tok_cap < emu.prep_cap else [])
    assert ks[0] > emu.nt
    for k in ks:
        tokens = np.stack([np.stack([rng.permutation(vocab)[:k] for _ in range(3)]) for _ in range(2)])
        logp = random_logp(rng, (2, 3, k), True)
        want = trie_beam_search(trie, tokens, logp, 6)
        assert_equal(trie_beam_search_cuda(trie, tokens, logp, 6, device=emu), want)
        assert (want[0] >= 0).sum() >= 6


def test_nar_steps_narrow_then_wide(emu):
    """A narrow step after the first (a few work items), then steps of more work items than the cluster has
    threads (several rounds a block), with finished keys at every depth."""
    rng = np.random.default_rng(17)
    wide = 65536 + np.arange(150)
    keys = {(a, b, int(c)) for a in range(3) for b in range(3) for c in wide}
    keys |= {(a, b, int(c), int(d)) for a in range(3) for b in range(3) for c in wide[:40] for d in range(5)}
    keys |= {(a,) for a in range(3)} | {(a, b) for a in range(3) for b in range(2)}
    trie = SuccinctTrie.build([list(k) for k in sorted(keys)])
    K = 150
    rows = [np.arange(K), np.arange(K), rng.permutation(wide), np.arange(K)]
    tokens = np.stack([np.stack(rows)] * 2).astype(np.int64)
    logp = random_logp(rng, tokens.shape, ties=False)
    for bw in (400, 5):
        want = trie_beam_search(trie, tokens, logp, bw, alpha=0.5)
        assert_equal(trie_beam_search_cuda(trie, tokens, logp, bw, alpha=0.5, device=emu), want)
        assert (want[0] >= 0).sum() >= 2 * min(bw, 300)


def test_nar_rows_with_repeated_tokens(emu):
    """Rows of 33 to NT proposals with many repeated tokens, repeated (token, log-prob) pairs and tied log-probs:
    the row sort and its deduplication (the best log-prob of a token, once)."""
    rng = np.random.default_rng(13)
    vocab = np.concatenate([np.arange(40), 65536 + np.arange(40)])
    trie = wide_trie(rng, 400, vocab)
    for k in sorted({min(33, emu.nt), min(64, emu.nt), min(100, emu.nt), emu.nt}):
        tokens = rng.choice(vocab[:30], size=(2, 3, k))  # ~k/30 copies of each token in a row
        logp = rng.choice(np.float32([-0.5, -1.0, -1.5, -2.0]), size=(2, 3, k))
        for bw in (5, 40):
            want = trie_beam_search(trie, tokens, logp, bw, alpha=0.5)
            assert_equal(trie_beam_search_cuda(trie, tokens, logp, bw, alpha=0.5, device=emu), want)
        assert (want[0] >= 0).sum() >= 5


def test_nar_more_steps_than_factor_cache(emu):
    """More steps than the kernel keeps length factors for (FAC_CAP): read each step, prep_kernel path."""
    from gtmkit.trie.search_cuda import FAC_CAP
    rng = np.random.default_rng(11)
    keys = [[int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, FAC_CAP + 4)))] for _ in range(30)]
    trie = SuccinctTrie.build(keys)
    T, K = FAC_CAP + 3, 3
    tokens = np.tile(np.arange(K), (1, T, 1))
    logp = random_logp(rng, (1, T, K), False)
    want = trie_beam_search(trie, tokens, logp, 4, alpha=0.8)  # alpha != 0: every step's factor counts
    assert_equal(trie_beam_search_cuda(trie, tokens, logp, 4, alpha=0.8, device=emu), want)
    assert (want[0] >= 0).sum() >= 3


def test_nar_edge_shapes(emu):
    trie = SuccinctTrie.build([[1, 2], [1]])
    for shape in ((2, 0, 3), (1, 2, 0)):
        got = trie_beam_search_cuda(trie, np.zeros(shape, np.int64), np.zeros(shape, np.float32), 2, device=emu)
        assert got[0].tolist() == [[-1, -1]] * shape[0] and np.all(np.isneginf(got[1]))
    tokens = np.array([[[1, 1, 2**40, -5], [2, 2, 1, 3]]], np.int64)  # repeats, ids no key can hold
    logp = np.float32([[[-3.0, -0.5, -0.1, -0.1], [-1.0, -0.25, -0.1, -0.1]]])
    got = trie_beam_search_cuda(trie, tokens, logp, 3, alpha=1.0, device=emu)
    assert_equal(got, trie_beam_search(trie, tokens, logp, 3, alpha=1.0))
    tokens_u = np.array([[[1, 2**63], [2, 1]]], np.uint64)
    logp_u = np.float64([[[-0.5, -0.1], [-0.2, -0.3]]])
    got = trie_beam_search_cuda(trie, tokens_u, logp_u, 2, device=emu)
    assert_equal(got, trie_beam_search(trie, tokens_u, logp_u, 2))


def test_nar_reuses_buffers(emu):
    rng = np.random.default_rng(11)
    trie, _ = random_trie(rng, 30)
    tokens, logp = random_tokens(rng, (2, 3, 5)), random_logp(rng, (2, 3, 5), False)
    first = trie_beam_search_cuda(trie, tokens, logp, 4, device=emu)
    n = len(emu.buffers)
    again = trie_beam_search_cuda(trie, tokens, logp, 4, device=emu)
    assert len(emu.buffers) == n
    assert_equal(again, first)
    assert first[0] is not again[0]  # outputs are new arrays


def test_nar_graph_replays_with_new_inputs(emu):
    """Host proposals go through one captured graph per (shape, trie, thresholds): replays must follow each
    call's proposals and alpha (staged data), a new threshold or trie gets its own graph."""
    rng = np.random.default_rng(12)
    trie, _ = random_trie(rng, 50)
    other, _ = random_trie(rng, 20)
    shape = (2, 4, 6)
    for i, (tr, alpha, theta) in enumerate([(trie, 0.0, -np.inf), (trie, 1.0, -np.inf), (trie, 0.5, -np.inf),
                                            (trie, 0.5, -1.5), (other, 0.5, -1.5)]):
        tokens, logp = random_tokens(rng, shape), random_logp(rng, shape, i % 2 == 0)
        got = trie_beam_search_cuda(tr, tokens, logp, 5, theta_tok=theta, alpha=alpha, device=emu)
        assert_equal(got, trie_beam_search(tr, tokens, logp, 5, theta_tok=theta, alpha=alpha))
        graphs = emu.buffers[(2, 5, 4, 6, 5)].graphs
        assert len(graphs) == (1 if i < 3 else 2 if i == 3 else 3)


@pytest.mark.parametrize("seed", range(5))
def test_ar_equals_cpu(emu, seed):
    rng = np.random.default_rng(200 + seed)
    trie, _ = random_trie(rng, int(rng.integers(1, 120)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 7))
    theta_tok, theta_sent, alpha = random_settings(rng, seed)
    max_steps = T if seed % 3 == 0 else None
    tokens, logp = random_tokens(rng, (T, b, bw, K)), random_logp(rng, (T, b, bw, K), seed % 2 == 0)
    cpu = TrieBeamStepper(trie, b, bw, theta_tok, theta_sent, alpha, max_steps)
    gpu = TrieBeamStepperCuda(trie, b, bw, theta_tok, theta_sent, alpha, max_steps, device=emu)
    for name in ("nodes", "scores", "parents", "tokens", "count"):
        assert np.array_equal(getattr(gpu.live, name), getattr(cpu.live, name)), name
    for t in range(T):
        k = K if seed % 2 else int(rng.integers(1, K + 1))  # K may change between steps
        cpu.step(tokens[t, :, :, :k], logp[t, :, :, :k])
        gpu.step(tokens[t, :, :, :k], logp[t, :, :, :k])
        for name in ("nodes", "scores", "parents", "tokens", "count"):
            assert np.array_equal(getattr(gpu.live, name), getattr(cpu.live, name)), (t, name)
        if t == T // 2:
            assert_equal(gpu.result(), cpu.result())
    assert gpu.done == cpu.done
    assert_equal(gpu.result(), cpu.result())


def test_nar_synth_workload(emu):
    """A synthetic workload (long LOUDS words, labels >= 65536, deep rank/select directories)."""
    from gtmkit.synth.keys import synth_keys
    from gtmkit.synth.proposals import synth_proposals
    trie = SuccinctTrie.build(synth_keys(6000, seed=3, vocab=200_000))
    tokens, logp = synth_proposals(trie, 2, 6, 48, seed=5)
    for bw in (48, 200):
        want = trie_beam_search(trie, tokens, logp, bw, alpha=0.5)
        got = trie_beam_search_cuda(trie, tokens, logp, bw, alpha=0.5, device=emu)
        assert_equal(got, want)
        assert (got[0] >= 0).sum() >= 4  # the workload finds keys


def test_ar_fewer_rows_than_beams(emu):
    """R between the live count and BW; R below the live count is refused as on the CPU."""
    from gtmkit.errors import GtmkitError
    rng = np.random.default_rng(9)
    trie, _ = random_trie(rng, 80)
    cpu = TrieBeamStepper(trie, 2, 6, alpha=0.7)
    gpu = TrieBeamStepperCuda(trie, 2, 6, alpha=0.7, device=emu)
    for t in range(4):
        r = max(int(cpu.live.count.max()), 1)
        tokens, logp = random_tokens(rng, (2, r, 5)), random_logp(rng, (2, r, 5), False)
        if r > 1:
            with pytest.raises(GtmkitError, match="<= R <="):
                gpu.step(tokens[:, :r - 1], logp[:, :r - 1])
        cpu.step(tokens, logp)
        gpu.step(tokens, logp)
        for name in ("nodes", "scores", "parents", "tokens", "count"):
            assert np.array_equal(getattr(gpu.live, name), getattr(cpu.live, name)), (t, name)
    assert_equal(gpu.result(), cpu.result())


@pytest.mark.parametrize("seed", range(6))
def test_server_equals_cpu(emu, seed):
    """TrieSearchServer's serve_kernel (one request a launch here) against the CPU search, several requests
    on one server (its buffers and counters reused), thresholds and length normalisation."""
    from gtmkit.trie.server_cuda import TrieSearchServer
    rng = np.random.default_rng(300 + seed)
    trie, _ = random_trie(rng, int(rng.integers(1, 60)))
    T, K, bw = int(rng.integers(1, 6)), int(rng.integers(1, 9)), int(rng.integers(1, 12))
    theta_tok, theta_sent, alpha = random_settings(rng, seed)
    srv = TrieSearchServer(trie, bw, T, K, theta_tok, theta_sent, alpha, device=emu)
    for _ in range(3):
        tokens, logp = random_tokens(rng, (1, T, K)), random_logp(rng, (1, T, K), seed % 2 == 0)
        want = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
        assert_equal(srv.search(tokens[0] if seed % 2 else tokens, logp[0] if seed % 2 else logp), want)
    srv.close()
    with pytest.raises(GtmkitError, match="closed"):
        srv.search(tokens, logp)


def test_server_rejects_bad_shapes(emu):
    from gtmkit.trie.server_cuda import TrieSearchServer
    trie = SuccinctTrie.build([[1, 2], [3]])
    with pytest.raises(GtmkitError, match="K must be"):
        TrieSearchServer(trie, 4, 2, emu.nt + 1, device=emu)
    srv = TrieSearchServer(trie, 4, 2, 3, device=emu)
    with pytest.raises(GtmkitError, match=r"\[1, 2, 3\]"):
        srv.search(np.zeros((1, 3, 3), np.int64), np.zeros((1, 3, 3), np.float32))



def test_shared_memory_and_cluster_argument():
    """search_kernel's dynamic shared memory at the default capacities fits a block's opt-in on sm_90 (227 KiB);
    the searches' cluster argument is checked on any device, with one-line errors."""
    from types import SimpleNamespace
    from gtmkit.trie import search_cuda as tsc
    from gtmkit.trie.search import trie_beam_stepper
    from gtmkit.trie.server_cuda import TrieSearchServer
    dev = SimpleNamespace(**{a: getattr(tsc.CupyDevice, a) for a in (
        "nt", "sort_cap", "prep_cap", "beam_cap", "tok_cap", "sel_cap")})
    base = tsc.search_smem(dev)
    assert base == 108200 and base <= 227 * 1024
    trie = SuccinctTrie.build([[1, 2], [3]])
    tokens, logp = np.zeros((1, 2, 2), np.int64), np.zeros((1, 2, 2), np.float32)
    calls = (lambda c: trie_beam_search(trie, tokens, logp, 2, cluster=c),
             lambda c: trie_beam_stepper(trie, 1, 2, cluster=c),
             lambda c: trie_beam_search_cuda(trie, tokens, logp, 2, device=object(), cluster=c),
             lambda c: TrieBeamStepperCuda(trie, 1, 2, device=object(), cluster=c),
             lambda c: TrieSearchServer(trie, 2, 2, 2, device=object(), cluster=c))
    for call in calls:
        for bad, match in ((0, ">= 1"), (9, "1 to 8"), (True, "an integer"), (2.0, "an integer")):
            with pytest.raises(GtmkitError, match=f"cluster must be {match}") as e:
                call(bad)
            assert "\n" not in str(e.value)
    assert trie_beam_search(trie, tokens, logp, 2, cluster=1)[0].shape == (1, 2)  # the CPU takes any valid one


@pytest.mark.parametrize("layout", ["random", "shared_top", "late_differ", "dense"])
def test_block_select(emu, layout):
    """The radix select alone: for n distinct keys and any m, exactly m keys are >= its result; keys sharing
    their top bytes, keys past SEL_CAP that differ where the first SEL_CAP do not, consecutive keys."""
    if emu.sel_cap > 64:
        pytest.skip("the configurations with a small SEL_CAP reach every path")
    rng = np.random.default_rng(hash(layout) % 2**32)
    cap = emu.sel_cap
    for n in sorted({1, 2, 5, 31, 32, 33, cap - 1, cap, cap + 1, 3 * cap + 7, 300}):
        low = rng.choice(2**16, size=n, replace=False).astype(np.uint64)  # distinct: so are the keys
        if layout == "random":
            keys = (rng.integers(1, 2**47, size=n, dtype=np.uint64) << np.uint64(16)) | low
        elif layout == "shared_top":  # the top 5 bytes equal
            keys = np.uint64(0x3E12345678 << 24) | (rng.integers(0, 256, size=n, dtype=np.uint64) << np.uint64(16)) | low
        elif layout == "late_differ":  # the first SEL_CAP share 6 bytes, later ones differ in the top byte
            keys = np.uint64(0x3E1234567890 << 16) | low
            keys[cap:] ^= rng.integers(1, 128, size=max(n - cap, 0), dtype=np.uint64) << np.uint64(56)
        else:  # consecutive values: every bit of the last byte used
            keys = np.uint64(0x4000000000000000) + rng.permutation(n).astype(np.uint64)
        for m in sorted({1, n, max(n // 2, 1), int(rng.integers(1, n + 1))}):
            out = np.zeros(1, np.uint64)
            a = np.ascontiguousarray(keys)
            emu.lib.emu_select(ctypes.c_void_p(a.ctypes.data), ctypes.c_uint(n), ctypes.c_uint(m),
                               ctypes.c_void_p(out.ctypes.data))
            assert int((keys >= out[0]).sum()) == m, (layout, n, m)


def test_host_sizes_match_the_kernels_defaults():
    """CupyDevice's sizes are the kernel file's defaults (its dynamic shared memory follows them): a changed
    default in kernels/trie_search.cu must change trie/search_cuda.py too."""
    import re
    from gtmkit.trie import search_cuda as tsc
    src = tsc.KERNEL_FILE.read_text()

    def default(name):
        return re.search(rf"#ifndef {name}\n#define {name} ([^\n/]+)", src).group(1).strip()

    for name in ("NT", "SORT_CAP", "PREP_CAP", "BEAM_CAP", "TOK_CAP", "SEL_CAP", "CL"):
        assert int(default(name)) == getattr(tsc, name), name


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["tails", "sid", "mixed"])
def test_label_layouts_equal_cpu_and_reference(emu, kind, seed):
    """Tries whose labels sit in the tail store, at 8 bits, or in a constant level: the kernels' labels at every
    node equal numba's, and NAR and AR search equal the plain-Python reference."""
    from gtmkit.trie import nav as nav
    from gtmkit.trie.search_cuda import _trie_params
    rng = np.random.default_rng(900 + seed)
    trie, ref = layout_trie(rng, kind)
    s = trie.stats()
    assert s["const_levels"] == 1 and (s["tail_nodes"] > 0) == (kind != "sid") and (s["low_bits"] == 8) == (kind != "tails")
    n = trie.num_nodes
    tp = _trie_params(emu, trie, "test")
    z, label, key, nz, pz, pnz = (np.empty(n, np.int64) for _ in range(6))
    p = [ctypes.c_void_p(x.ctypes.data) for x in (tp.table, z, label, key, nz, pz, pnz)]
    emu.built(tp.layout)[0].emu_nav(p[0], ctypes.c_longlong(n), *p[1:])
    assert np.array_equal(label[1:], nav.labels_of(trie.arrays, np.arange(1, n)))
    b, T, K, bw = 2, 6, 6, int(rng.integers(1, 8))
    vocab = sorted({t for k in ref.key_list for t in k}) + [-1, 11]
    settings = random_settings(rng, seed)
    nar = rng.choice(vocab, size=(b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0)
    ar = rng.choice(vocab, size=(T, b, bw, K)), random_logp(rng, (T, b, bw, K), seed % 2 == 1)
    check_reference(emu, trie, ref, nar, ar, bw, settings)
    want = trie_beam_search(trie, nar[0], nar[1], bw, *settings)
    assert_equal(trie_beam_search_cuda(trie, nar[0], nar[1], bw, *settings, device=emu), want)
