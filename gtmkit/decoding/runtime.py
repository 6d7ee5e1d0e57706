"""One decoder step for every live beam of a batch, in the wide-beam, short-sequence shape (docs/design.md §8):

- cross-attention K/V are projected once per request; a request's beams are the queries of one attention over
  its context (never copied per beam);
- the self-attention KV cache is one block per step (rows of that step) plus each row's ancestors: a beam
  reorder writes a few ints, never a K/V copy, and a step reads exactly its rows' ancestors' keys;
- matrices run in the weights' dtype with fp32 accumulation; norms, softmaxes and the log-probs are computed in
  fp32; the residual stream is fp32, or bf16 on the GPU with bf16 weights.

`step(t, prev_tokens, parent_rows)` is the `logits_fn` of `gtmkit.beam_search` and the decoder of
`GraphedBeamSearch`: it allocates nothing on the host side and never waits for the device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .t5 import T5Weights


# the residual stream's dtype on the GPU: bf16 where the weights are (as the model keeps it; a third fewer bytes
# through every norm), fp32 for fp16 weights (T5's activations overflow fp16) and fp32 ones
RESIDUAL = {torch.bfloat16: torch.bfloat16}


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """T5's norm on the fp32 residual stream."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class DecoderRuntime:
    """The decoder of one search: `begin(encoder_states, encoder_mask)`, then `step` for t = 0 .. L-1.

    encoder_states [B, N, d] in any float dtype, encoder_mask [B, N] (True/1 where a context token is real) or None
    where every context token is;
    rows of step t are request-major: row r serves request r // (rows / B)."""

    def __init__(self, weights: T5Weights, offsets, vocab: int):
        self.w = weights
        self.offsets = [int(o) for o in offsets]
        self.vocab = int(vocab)
        self.inner = weights.heads * weights.d_kv
        self.ops = None
        if weights.embed.is_cuda:  # the fused kernels; the torch code below is the CPU path and their reference
            from .cuda_ops import MAX_D, MAX_DK, MAX_POS, CudaOps
            d = int(weights.embed.shape[1])
            # (shapes past the kernels' limits run the torch code on the GPU too)
            if d <= MAX_D and d % 4 == 0 and weights.d_kv <= MAX_DK and weights.d_kv % 4 == 0 and \
                    len(self.offsets) < MAX_POS:
                self.residual = RESIDUAL.get(weights.dtype, torch.float32)
                self.ops = CudaOps(weights.dtype, self.residual)
                # the head padded to whole 64-row tiles (an odd row count takes slower GEMM kernels); the padding's
                # logits are left out of the softmax
                pad = -weights.lm_head.shape[0] % 64
                self.head = torch.cat([weights.lm_head, weights.lm_head.new_zeros(pad, d)]) if pad else weights.lm_head
                # relu fused into its GEMM (cuBLASLt's epilogue), with a zero bias
                self.relu = not weights.gated and isinstance(weights.act, torch.nn.ReLU)
                self.zero_bias = weights.lm_head.new_zeros(weights.d_ff)

    def begin(self, encoder_states: torch.Tensor, encoder_mask: torch.Tensor, sizes=None) -> None:
        """Each layer's cross-attention K/V [B, H, N, d_kv] for these requests, and the additive mask; with the
        search's per-step beam sizes, the GPU's self-attention cache: a layer's Q|K|V rows of every step."""
        w = self.w
        B, N, _ = encoder_states.shape
        e = encoder_states.to(w.dtype)
        self.B = B
        self.cross = []
        for layer in w.layers:
            kv = F.linear(e, layer.kv_cross).view(B, N, 2, w.heads, w.d_kv).permute(2, 0, 3, 1, 4)
            self.cross.append((kv[0], kv[1]))
        # additive mask in the weights' dtype (SDPA adds it to the scores): a padded context token never attends;
        # None (no padding) spares SDPA a mask it would expand to every query
        neg = torch.finfo(w.dtype).min
        self.cross_mask = None if encoder_mask is None else \
            torch.where(encoder_mask.bool(), 0.0, neg).to(w.dtype).view(B, 1, 1, N)
        self.keys, self.values, self.ancestors = [], [], None
        self.fused = self.ops is not None and sizes is not None
        if self.fused:
            rows = [B * int(s) for s in sizes]
            self.base = [sum(rows[:t]) for t in range(len(rows))]
            self.qkv = [torch.empty(sum(rows), 3 * self.inner, dtype=w.dtype, device=e.device) for _ in w.layers]
            self.bias = [w.bias_table[t, :t + 1].T.contiguous() for t in range(len(rows))]

    def step(self, t: int, prev_tokens, parent_rows) -> torch.Tensor:
        """Log-probs [R, V] (fp32) over step t's SID tokens for R rows; prev_tokens: the SID token each row took at
        step t-1 (ignored at t = 0), parent_rows: the row of step t-1 each row extends (-1: a dead row, whose output
        is ignored). Torch, CuPy or numpy int arrays."""
        if self.fused:
            return self._step_fused(t, prev_tokens, parent_rows)
        w = self.w
        prev = _tensor(prev_tokens, self.w.embed.device).long()
        R = int(prev.shape[0])
        rows = torch.arange(R, device=prev.device)
        if t == 0:
            tokens = torch.full((R,), w.start_token, dtype=torch.long, device=prev.device)
            self.keys, self.values = [], []
            self.ancestors = rows[:, None]
        else:
            parent = _tensor(parent_rows, prev.device).long().clamp_(min=0)
            tokens = prev.clamp(min=0) + self.offsets[t - 1]
            self.ancestors = torch.cat([self.ancestors.index_select(0, parent), rows[:, None]], dim=1)
        x = w.embed.index_select(0, tokens).float()
        bias = w.bias_table[t, :t + 1].T.contiguous()  # [H, t + 1]: query t over keys 0..t
        keys, values = [], []
        for i, layer in enumerate(w.layers):
            h = rms_norm(x, layer.ln_self, w.eps).to(w.dtype)
            q, k, v = F.linear(h, layer.qkv).view(R, 3, w.heads, w.d_kv).unbind(1)
            keys.append(k)
            values.append(v)
            x = x + F.linear(self._self_attention(i, t, q, k, v, bias).to(w.dtype), layer.o_self).float()
            h = rms_norm(x, layer.ln_cross, w.eps).to(w.dtype)
            x = x + F.linear(self._cross_attention(i, F.linear(h, layer.q_cross)), layer.o_cross).float()
            h = rms_norm(x, layer.ln_ff, w.eps).to(w.dtype)
            a = F.linear(h, layer.wi)
            a = w.act(a[:, :w.d_ff]) * a[:, w.d_ff:] if w.gated else w.act(a)
            x = x + F.linear(a, layer.wo).float()
        self.keys.append(keys)
        self.values.append(values)
        h = rms_norm(x, w.final_ln, w.eps) * w.scale_out
        return self._log_probs(t, h.to(w.dtype))

    def _log_probs(self, t: int, h: torch.Tensor) -> torch.Tensor:
        logits = F.linear(h, self.w.lm_head).float()
        off = self.offsets[t]
        return (logits[:, off:off + self.vocab] - torch.logsumexp(logits, dim=-1, keepdim=True)).contiguous()

    def _step_fused(self, t: int, prev_tokens, parent_rows) -> torch.Tensor:
        """step() on the GPU: the same math, the memory-bound parts as fused kernels (cuda_ops.py) and the self-attention
        cache as one Q|K|V buffer a layer, each row's ancestors as rows of it."""
        w, ops = self.w, self.ops
        prev = _tensor(prev_tokens, w.embed.device).long()
        R = int(prev.shape[0])
        own = self.base[t] + torch.arange(R, device=prev.device)
        if t == 0:
            tokens = torch.full((R,), w.start_token, dtype=torch.long, device=prev.device)
            self.ancestors = own[:, None]
        else:
            parent = _tensor(parent_rows, prev.device).long().clamp_(min=0)
            tokens = prev.clamp(min=0) + self.offsets[t - 1]
            self.ancestors = torch.cat([self.ancestors.index_select(0, parent), own[:, None]], dim=1)
        d = w.embed.shape[1]
        x = torch.empty(R, d, dtype=self.residual, device=prev.device)
        h = torch.empty(R, d, dtype=w.dtype, device=prev.device)
        ops.add_rms_norm(x, w.embed, w.layers[0].ln_self, h, w.eps, tokens=tokens)
        y = None
        for i, layer in enumerate(w.layers):
            if y is not None:
                ops.add_rms_norm(x, y, layer.ln_self, h, w.eps)
            torch.matmul(h, layer.qkv.T, out=self.qkv[i][self.base[t]:self.base[t] + R])
            attn = torch.empty(R, self.inner, dtype=w.dtype, device=prev.device)
            ops.prefix_attention(self.qkv[i], self.ancestors, self.bias[t], attn, w.heads, w.d_kv)
            ops.add_rms_norm(x, F.linear(attn, layer.o_self), layer.ln_cross, h, w.eps)
            y = F.linear(self._cross_attention(i, F.linear(h, layer.q_cross)), layer.o_cross)
            ops.add_rms_norm(x, y, layer.ln_ff, h, w.eps)
            if self.relu:
                a = torch._addmm_activation(self.zero_bias, h, layer.wi.T)
            else:
                a = F.linear(h, layer.wi)
                a = w.act(a[:, :w.d_ff]) * a[:, w.d_ff:] if w.gated else w.act(a)
            y = F.linear(a, layer.wo)
        ops.add_rms_norm(x, y, w.final_ln, h, w.eps, w.scale_out)
        logits = F.linear(h, self.head)
        out = torch.empty(R, self.vocab, dtype=torch.float32, device=prev.device)
        ops.log_probs(logits, w.lm_head.shape[0], self.offsets[t], self.vocab, out)
        return out

    def _self_attention(self, i: int, t: int, q, k, v, bias) -> torch.Tensor:
        """q, k, v [R, H, d_kv] of step t -> [R, H * d_kv]: each row attends to its ancestors' keys at steps 0..t-1
        (found through self.ancestors, never copied into a per-row cache) and its own."""
        R = q.shape[0]
        anc = self.ancestors
        ks = [self.keys[s][i].index_select(0, anc[:, s]) for s in range(t)] + [k]
        vs = [self.values[s][i].index_select(0, anc[:, s]) for s in range(t)] + [v]
        K = torch.stack(ks, dim=1).float()  # [R, t + 1, H, d_kv]
        V = torch.stack(vs, dim=1).float()
        scores = torch.einsum("rhd,rshd->rhs", q.float(), K) + bias
        p = torch.softmax(scores, dim=-1)
        return torch.einsum("rhs,rshd->rhd", p, V).reshape(R, self.inner)

    def _cross_attention(self, i: int, q: torch.Tensor) -> torch.Tensor:
        """q [R, H * d_kv] -> [R, H * d_kv]: the rows of a request query its context's K/V, projected once."""
        w = self.w
        R = q.shape[0]
        per = R // self.B
        k, v = self.cross[i]
        q = q.view(self.B, per, w.heads, w.d_kv).transpose(1, 2)  # [B, H, rows a request, d_kv]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.cross_mask, scale=1.0)
        return out.transpose(1, 2).reshape(R, self.inner)


def _tensor(x, device) -> torch.Tensor:
    """A torch view of a torch, CuPy (DLPack, no copy) or numpy int array."""
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return torch.from_dlpack(x)
    return torch.as_tensor(x, device=device)
