# TorchScript methods, not a Python module: src/jit/export.cpp compiles this file into each exported module
# with torch::jit::Module::define (the build embeds it; see cmake/embed_torchscript.cmake). The native resolver
# knows `torch` (ATen ops) but not dtype names, so a dtype is spelled as its ScalarType number, as saved
# TorchScript code spells it (11 = torch.bool), and failed checks use `assert` (RuntimeError is not in scope).
#
# The attention core, shared by the three exported modules. It mirrors src/modules/shared/heads.cpp (checks,
# masks lifted to [B|1, H|1, Tq, Tk], projections, heads) and the Math backend (src/backends/math.cpp), op for
# op; which (query, key) pairs are blocked follows src/backends/masks.h, and tests/test_mask_semantics.cpp
# checks that it agrees. It reads the module attributes num_heads, num_kv_heads, causal, bottom_right, scale, dropout,
# window_left, window_right, softcap, alibi_slopes, sinks, query_width, key_width and value_width, and the
# submodules q_proj, k_proj and v_proj.

def _broadcasts_to(self, shape: List[int], target: List[int]) -> bool:
    if len(shape) > len(target):
        return False
    offset = len(target) - len(shape)
    for i in range(len(shape)):
        if shape[i] != 1 and shape[i] != target[offset + i]:
            return False
    return True

def _dtype_name(self, dtype: int) -> str:
    names = {3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64", 11: "bool", 15: "bfloat16"}
    if dtype in names:
        return names[dtype]
    return "ScalarType " + str(dtype)

def _check_input(self, name: str, x: Tensor, width: int, rank: int):
    assert x.dim() == rank, (
        "attn: " + name + " must have the query's rank " + str(rank)
        + " (batched [B, T, E] or unbatched [T, E]), got shape " + str(x.shape))
    assert x.is_floating_point(), "attn: " + name + " must be a floating-point tensor"
    assert x.size(-1) == width, (
        "attn: " + name + " must have last dimension " + str(width) + ", got shape " + str(x.shape))

def _lift_pair_mask(self, name: str, mask: Optional[Tensor], want_bool: bool, query: Tensor, batched: bool,
                    batch: int, tq: int, tk: int) -> Optional[Tensor]:
    # [Tq, Tk] or [B|1, H|1, Tq, Tk] (unbatched: [Tq, Tk] or [H|1, Tq, Tk], lifted to [1, H|1, Tq, Tk])
    if mask is None:
        return None
    assert not want_bool or mask.dtype == 11, "attn: " + name + " must be a bool tensor (true = may attend)"
    assert want_bool or mask.dtype == query.dtype, (
        "attn: " + name + " must be floating with the inputs' dtype (it is added to the scores)")
    if batched:
        target = [batch, self.num_heads, tq, tk]
        assert mask.dim() == 2 or mask.dim() == 4, (
            "attn: " + name + " must be [Tq, Tk] or [B|1, H|1, Tq, Tk], got shape " + str(mask.shape))
    else:
        target = [self.num_heads, tq, tk]
        assert mask.dim() == 2 or mask.dim() == 3, (
            "attn: " + name + " must be [Tq, Tk] or [H|1, Tq, Tk] for unbatched inputs, got shape "
            + str(mask.shape))
    assert self._broadcasts_to(mask.shape, target), (
        "attn: " + name + " must broadcast to " + str(target) + ", got shape " + str(mask.shape))
    if mask.dim() == 3:
        return mask.unsqueeze(0)
    return mask

def _split_heads(self, x: Tensor, heads: int) -> Tensor:
    # [B, T, H * d] -> [B, H, T, d]
    return x.view([x.size(0), x.size(1), heads, x.size(2) // heads]).transpose(1, 2)

def _either(self, a: Optional[Tensor], b: Tensor) -> Tensor:
    if a is None:
        return b
    return a.logical_or(b)

def _weighted_values(self, probs: Tensor, value: Tensor, blocked: Optional[Tensor]) -> Tensor:
    # probs @ value where a blocked key contributes exactly nothing, even a NaN or Inf value: non-finite values
    # are multiplied as 0, then put back (IEEE semantics) only where an allowed key holds them.
    if blocked is None:
        return torch.matmul(probs, value)
    finite = torch.isfinite(value)
    if value.is_cpu and bool(finite.all()):
        return torch.matmul(probs, value)
    out = torch.matmul(probs, value.masked_fill(finite.logical_not(), 0))
    reach = blocked.logical_not().to(value.dtype)
    pos = torch.matmul(reach, torch.isposinf(value).to(value.dtype)) > 0
    neg = torch.matmul(reach, torch.isneginf(value).to(value.dtype)) > 0
    nan = torch.matmul(reach, torch.isnan(value).to(value.dtype)) > 0
    nan = nan.logical_or(pos.logical_and(neg)).logical_or(torch.isnan(out))
    out = out.masked_fill(pos, float("inf"))
    out = out.masked_fill(neg, float("-inf"))
    return out.masked_fill(nan, float("nan"))

def _attention(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
               attend_mask: Optional[Tensor], additive_mask: Optional[Tensor]) -> Tensor:
    # q [B, H, Tq, d_k], k [B, H, Tk, d_k], v [B, H, Tk, d_v]; key_padding_mask [B, 1, Tk] (true = padding);
    # attend_mask (true = may attend) and additive_mask broadcast to [B, H, Tq, Tk]. Returns [B, H, Tq, d_v].
    scale = 1.0 / torch.sqrt(float(q.size(-1)))
    explicit_scale = self.scale
    if explicit_scale is not None:
        scale = explicit_scale
    scores = torch.matmul(q * scale, k.transpose(-2, -1))
    if self.softcap > 0.0:
        scores = torch.tanh(scores / self.softcap) * self.softcap
    tq = q.size(-2)
    tk = k.size(-2)
    offset = 0
    if self.bottom_right:
        offset = tk - tq
    slopes = self.alibi_slopes
    if slopes is not None:
        # -slope_h * |i + offset - j|, computed in float64 as the Math backend's alibi_bias
        distance = (torch.arange(tq, device=q.device).unsqueeze(1) + offset
                    - torch.arange(tk, device=q.device).unsqueeze(0)).abs().double()
        bias = -slopes.to(q.device).double().view([-1, 1, 1]) * distance
        scores = scores + bias.to(scores.dtype)
    if additive_mask is not None:
        scores = scores + additive_mask
    blocked: Optional[Tensor] = None
    if key_padding_mask is not None:
        blocked = key_padding_mask.unsqueeze(-2)
    if attend_mask is not None:
        blocked = self._either(blocked, attend_mask.logical_not())
    if additive_mask is not None:
        # -inf blocks the pair outright, so that a NaN score there is replaced, not summed
        blocked = self._either(blocked, torch.isneginf(additive_mask))
    # the band around each query's diagonal: causal bounds its right side at 0, the window either side
    right = self.window_right
    if self.causal:
        right = 0 if right < 0 else min(right, 0)
    if right >= 0 or self.window_left >= 0:
        distance = (torch.arange(tk, device=q.device).unsqueeze(0) - torch.arange(tq, device=q.device).unsqueeze(1)
                    - offset)
        if self.window_left >= 0:
            blocked = self._either(blocked, distance < -self.window_left)
        if right >= 0:
            blocked = self._either(blocked, distance > right)
    row_blocked: Optional[Tensor] = None
    if blocked is not None:
        # a query with no allowed key gets finite scores, then zero probabilities: a zero output row, no NaN
        row_blocked = blocked.all(-1, keepdim=True)
        scores = scores.masked_fill(blocked, float("-inf")).masked_fill(row_blocked, 0.0)
    sinks = self.sinks
    if sinks is None:
        probs = torch.softmax(scores, -1)
    else:
        # the sink is one more column of the softmax, with no value behind it
        sink = sinks.to(scores.dtype).view([-1, 1, 1]).expand([scores.size(0), scores.size(1), scores.size(2), 1])
        probs = torch.softmax(torch.cat([scores, sink], -1), -1).narrow(-1, 0, tk)
    if row_blocked is not None:
        probs = probs.masked_fill(row_blocked, 0.0)
    if self.training and self.dropout > 0.0:
        probs = torch.dropout(probs, self.dropout, True)
    return self._weighted_values(probs, v, blocked)

def _project_and_attend(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor],
                        attend_mask: Optional[Tensor], additive_mask: Optional[Tensor]) -> Tensor:
    rank = query.dim()
    assert rank == 2 or rank == 3, (
        "attn: the query must be [B, T, " + str(self.query_width) + "] or unbatched [T, "
        + str(self.query_width) + "], got shape " + str(query.shape))
    self._check_input("the query", query, self.query_width, rank)
    self._check_input("the key", key, self.key_width, rank)
    self._check_input("the value", value, self.value_width, rank)
    weight_dtype = self.q_proj.weight.dtype
    for name, x in [("query", query), ("key", key), ("value", value)]:
        assert x.dtype == weight_dtype, (
            "attn: the " + name + " is " + self._dtype_name(x.dtype) + " but the module's parameters are "
            + self._dtype_name(weight_dtype) + ": convert the inputs, or the module before exporting it")
    batched = rank == 3
    tq = query.size(-2)
    tk = key.size(-2)
    assert value.size(-2) == tk, (
        "attn: key and value must have the same length, got " + str(key.shape) + " and " + str(value.shape))
    batch = 1
    if batched:
        batch = query.size(0)
        assert key.size(0) == batch and value.size(0) == batch, (
            "attn: query, key and value must have the same batch size, got " + str(query.shape) + ", "
            + str(key.shape) + ", " + str(value.shape))
    padding: Optional[Tensor] = None
    if key_padding_mask is not None:
        expected = [tk]
        if batched:
            expected = [batch, tk]
        assert key_padding_mask.dtype == 11, (
            "attn: key_padding_mask must be a bool tensor (true = padding), got "
            + self._dtype_name(key_padding_mask.dtype))
        assert key_padding_mask.shape == expected, (
            "attn: key_padding_mask must be of shape " + str(expected) + " (true = padding), got shape "
            + str(key_padding_mask.shape))
        padding = key_padding_mask.reshape([batch, 1, tk])
    attend = self._lift_pair_mask("attend_mask", attend_mask, True, query, batched, batch, tq, tk)
    additive = self._lift_pair_mask("additive_mask", additive_mask, False, query, batched, batch, tq, tk)

    self_attention = query is key and key is value
    if not batched:
        query = query.unsqueeze(0)
        key = key.unsqueeze(0)
        value = value.unsqueeze(0)
    if self_attention:
        # one product with the three weights stacked, as the C++ modules do
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        qb = self.q_proj.bias
        kb = self.k_proj.bias
        vb = self.v_proj.bias
        if qb is not None and kb is not None and vb is not None:
            qkv = torch.linear(query, weight, torch.cat([qb, kb, vb]))
        else:
            qkv = torch.linear(query, weight)
        q_width = self.q_proj.weight.size(0)
        k_width = self.k_proj.weight.size(0)
        v_width = self.v_proj.weight.size(0)
        q = self._split_heads(qkv.narrow(-1, 0, q_width), self.num_heads)
        k = self._split_heads(qkv.narrow(-1, q_width, k_width), self.num_kv_heads)
        v = self._split_heads(qkv.narrow(-1, q_width + k_width, v_width), self.num_kv_heads)
    else:
        q = self._split_heads(self.q_proj.forward(query), self.num_heads)
        k = self._split_heads(self.k_proj.forward(key), self.num_kv_heads)
        v = self._split_heads(self.v_proj.forward(value), self.num_kv_heads)
    if self.num_kv_heads != self.num_heads:
        # grouped-query attention: query head h uses K/V head h // (num_heads // num_kv_heads)
        k = k.repeat_interleave(self.num_heads // self.num_kv_heads, 1)
        v = v.repeat_interleave(self.num_heads // self.num_kv_heads, 1)

    out = self._attention(q, k, v, padding, attend, additive)
    # [B, H, Tq, d_v] -> [B, Tq, H * d_v]
    out = out.transpose(1, 2).reshape([out.size(0), out.size(2), out.size(1) * out.size(3)])
    if not batched:
        out = out.squeeze(0)
    return out
