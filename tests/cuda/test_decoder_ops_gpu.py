"""The decoder's fused kernels (gtmkit/decoding/kernels/decoder_ops.cu) against torch on random inputs: the prefix
self-attention (head sizes of 16-256, prefixes of 1-8 positions, shared and scattered ancestors), the add + RMS norm (fp32 and element-type residuals), the head's log-softmax."""

from __future__ import annotations

import pytest

from gtmkit._gpu import cuda_available

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
if not (cuda_available() and torch.cuda.is_available()):
    pytest.skip("needs CuPy and torch with a CUDA device", allow_module_level=True)

from gtmkit.decoding.cuda_ops import CudaOps  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _attention_reference(qkv, anc, bias, H, DK):
    R, S = anc.shape
    inner = H * DK
    rows = qkv.float()[anc]  # [R, S, 3 * inner]
    q = rows[:, -1, :inner].view(R, H, DK)
    k = rows[:, :, inner:2 * inner].view(R, S, H, DK)
    v = rows[:, :, 2 * inner:].view(R, S, H, DK)
    p = torch.softmax(torch.einsum("rhd,rshd->rhs", q, k) + bias, dim=-1)
    return torch.einsum("rhs,rshd->rhd", p, v).reshape(R, inner)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("DK,H", [(16, 4), (64, 2), (128, 16), (256, 2), (24, 3)])
@pytest.mark.parametrize("S", [1, 2, 4, 5, 8])
def test_prefix_attention(dtype, DK, H, S):
    g = torch.Generator(device="cuda").manual_seed(DK * 100 + S)
    R, total = 37, 300
    qkv = torch.randn(total, 3 * H * DK, device="cuda", generator=g).to(dtype)
    # earlier positions shared by several rows (a beam's siblings), the last one each row's own
    anc = torch.randint(0, 40, (R, S), device="cuda", generator=g)
    anc[:, -1] = 100 + torch.arange(R, device="cuda")
    bias = torch.randn(H, S, device="cuda", generator=g)
    ops = CudaOps(dtype)
    out = torch.full((R, H * DK), float("nan"), device="cuda", dtype=dtype)
    ops.prefix_attention(qkv, anc, bias, out, H, DK)
    want = _attention_reference(qkv, anc, bias, H, DK)
    torch.testing.assert_close(out.float(), want, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 1024, 4096])
@pytest.mark.parametrize("residual", ["float32", "element"])
def test_add_rms_norm(dtype, D, residual):
    if residual == "element" and dtype == torch.float32:
        pytest.skip("a float32 element type is the float32 residual")
    res = torch.float32 if residual == "float32" else dtype
    g = torch.Generator(device="cuda").manual_seed(D)
    R, eps, scale = 19, 1e-6, 0.5
    ops = CudaOps(dtype, res)
    x = torch.randn(R, D, device="cuda", generator=g).to(res)
    y = torch.randn(R, 2 * D, device="cuda", generator=g).to(dtype)[:, :D]  # a strided view, as a GEMM slice
    w = torch.rand(D, device="cuda", generator=g) + 0.5
    out = torch.empty(R, D, device="cuda", dtype=dtype)
    x0 = x.clone()
    ops.add_rms_norm(x, y, w, out, eps, scale)
    want_x = (x0.float() + y.float()).to(res)
    torch.testing.assert_close(x, want_x, atol=TOL[dtype], rtol=TOL[dtype])
    xf = want_x.float()
    want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w * scale
    torch.testing.assert_close(out.float(), want, atol=TOL[dtype] * 4, rtol=TOL[dtype] * 4)
    # from token embeddings: x = table[tokens]
    table = torch.randn(50, D, device="cuda", generator=g).to(dtype)
    tokens = torch.randint(0, 50, (R,), device="cuda", generator=g)
    ops.add_rms_norm(x, table, w, out, eps, tokens=tokens)
    torch.testing.assert_close(x.float(), table[tokens].float(), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,off,vocab,ld", [(2051, 3, 512, 2112), (2051, 1539, 512, 2112), (70, 10, 60, 70)])
def test_log_probs(dtype, V, off, vocab, ld):
    g = torch.Generator(device="cuda").manual_seed(V + off)
    R = 23
    logits = (4 * torch.randn(R, ld, device="cuda", generator=g)).to(dtype)
    logits[:, V:] = 1e4 if dtype == torch.float32 else 100  # padding past V: never in the softmax
    out = torch.empty(R, vocab, device="cuda")
    CudaOps(dtype).log_probs(logits, V, off, vocab, out)
    lf = logits[:, :V].float()
    want = lf[:, off:off + vocab] - torch.logsumexp(lf, dim=-1, keepdim=True)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-5)
