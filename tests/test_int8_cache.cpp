// The int8 KV cache: KVCache(dtype kInt8) rotates each (token, head) row (hadamard_rows) and quantizes it on
// append, and the decode kernel reads the int8 rows with their scales. References: the rotation and the
// quantization's definition written out in float64 (support.h's float64_hadamard), and attention in float64
// over the dequantized rows (the cache's own int8 elements times its own scales).

#include "kernel_variants.h"
#include "support.h"

#include <attn/attn.h>
#include <attn/ops/decode_attention.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace attn::test {
namespace {

TEST(Int8Cache, AppendStoresEachRowWithinHalfAStepOfItsScale) {
  torch::manual_seed(41);
  KVCache cache(KVCacheOptions(2, 2, 3, 40, 16).value_dim(24).dtype(torch::kInt8));
  ASSERT_TRUE(cache.quantized());
  torch::Tensor key = torch::randn({2, 3, 5, 40}) * 3.0;
  key[0][1][2].zero_();      // an all-zero row: scale 0, elements 0
  key[1][2][2][7] = -250.0;  // one large element sets its row's scale
  const torch::Tensor value = torch::randn({2, 3, 5, 24}, torch::kFloat64);  // any floating dtype is quantized
  cache.append(1, key.to(torch::kBFloat16), value, {5, 3});

  EXPECT_EQ(cache.keys(1).scalar_type(), torch::kInt8);
  EXPECT_EQ(cache.key_scales(1).sizes(), (std::vector<int64_t>{2, 3, 16}));
  EXPECT_EQ(cache.lengths(1)[0].item<int64_t>(), 5);
  EXPECT_EQ(cache.lengths(1)[1].item<int64_t>(), 3);
  // What each row is quantized from: the appended row rotated, x·H (d = 40: blocks of 8; d = 24: blocks of 8).
  const torch::Tensor kb = torch::matmul(key.to(torch::kBFloat16).to(torch::kFloat64), float64_hadamard(40));
  const torch::Tensor vr = torch::matmul(value, float64_hadamard(24));
  for (const auto& [x, rows, scales, n] :
       {std::tuple{kb, cache.keys(1), cache.key_scales(1), std::vector<int64_t>{5, 3}},
        std::tuple{vr, cache.values(1), cache.value_scales(1), std::vector<int64_t>{5, 3}}}) {
    for (int64_t b = 0; b < 2; ++b) {
      const torch::Tensor written = x[b].narrow(1, 0, n[b]);                 // [H, n, d]
      const torch::Tensor q = rows[b].narrow(1, 0, n[b]).to(torch::kFloat64);
      const torch::Tensor s = scales[b].narrow(1, 0, n[b]).to(torch::kFloat64);
      const torch::Tensor expected_scale = std::get<0>(written.abs().max(-1)) / 127.0;
      EXPECT_TRUE(torch::allclose(s, expected_scale, 1e-6, 0.0)) << "b=" << b;
      EXPECT_LE(q.abs().max().item<double>(), 127.0);
      const torch::Tensor error = (q * s.unsqueeze(-1) - written).abs();
      EXPECT_TRUE((error <= s.unsqueeze(-1) * (0.5 + 1e-5) + 1e-30).all().item<bool>()) << "b=" << b;
      // Positions past a row's count are not written.
      EXPECT_EQ(rows[b].narrow(1, n[b], 16 - n[b]).abs().sum().item<int64_t>(), 0);
    }
  }
  EXPECT_EQ(cache.key_scales(1)[0][1][2].item<float>(), 0.0f);
  EXPECT_EQ(cache.keys(1)[0][1][2].abs().sum().item<int64_t>(), 0);
  // The large element is spread over its block of 8: the row's scale is about 250 / sqrt(8) / 127, where an
  // unrotated row's would be 250 / 127.
  EXPECT_LT(cache.key_scales(1)[1][2][2].item<float>(), 0.5 * 250.0 / 127.0);
  EXPECT_GT(cache.key_scales(1)[1][2][2].item<float>(), 0.8 * 250.0 / std::sqrt(8.0) / 127.0);
  EXPECT_FALSE(cache.key_scales(0).sum().item<float>() != 0.0f);  // the other layer untouched
}

// hadamard_rows is the block-diagonal Walsh–Hadamard matrix of support.h's float64 definition, its own inverse,
// for head sizes whose largest power-of-two divisor is all of d (64, 128), part of it (40, 96) or 1 (3: no
// rotation), and for float32, bfloat16 and float64 rows.
TEST(Int8Cache, HadamardRowsIsTheOrthonormalWalshHadamardTransform) {
  torch::manual_seed(5);
  for (int64_t d : {1, 2, 3, 6, 8, 40, 64, 96, 128}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    const torch::Tensor x = torch::randn({3, 5, d}, torch::kFloat64);
    const torch::Tensor expected = torch::matmul(x, float64_hadamard(d));
    const torch::Tensor rotated = hadamard_rows(x);
    EXPECT_EQ(rotated.scalar_type(), torch::kFloat64);
    EXPECT_TRUE(torch::allclose(rotated, expected, 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(hadamard_rows(rotated), x, 1e-12, 1e-12));
    const torch::Tensor from_float = hadamard_rows(x.to(torch::kFloat32));
    EXPECT_EQ(from_float.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::allclose(from_float.to(torch::kFloat64), expected, 1e-5, 1e-5));
    const torch::Tensor from_bf16 = hadamard_rows(x.to(torch::kBFloat16).transpose(0, 1));  // strided input
    EXPECT_EQ(from_bf16.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::allclose(from_bf16.to(torch::kFloat64),
                                torch::matmul(x.to(torch::kBFloat16).to(torch::kFloat64), float64_hadamard(d))
                                    .transpose(0, 1),
                                1e-5, 1e-5));
  }
  const torch::Tensor half = torch::randn({4, 24}).to(torch::kHalf);
  EXPECT_TRUE(torch::allclose(hadamard_rows(half).to(torch::kFloat64),
                              torch::matmul(half.to(torch::kFloat64), float64_hadamard(24)), 1e-5, 1e-5));
  EXPECT_EQ(hadamard_rows(torch::empty({0, 64})).sizes(), (std::vector<int64_t>{0, 64}));
  EXPECT_EQ(hadamard_rows(torch::empty({3, 0})).sizes(), (std::vector<int64_t>{3, 0}));
  EXPECT_ERROR_CONTAINS(hadamard_rows(torch::ones({2, 4}, torch::kLong)),
                        "x must be a float32, float64, bfloat16 or float16 CPU tensor [..., d], got Long");
  EXPECT_ERROR_CONTAINS(hadamard_rows(torch::Tensor()), "CPU tensor [..., d], got an undefined tensor");
  EXPECT_ERROR_CONTAINS(hadamard_rows(torch::ones({2, 4}, torch::requires_grad())), "computes no gradient");
  torch::NoGradGuard no_grad;
  EXPECT_EQ(hadamard_rows(torch::ones({2, 4}, torch::requires_grad())).sizes(), (std::vector<int64_t>{2, 4}));
}

// Why the cache rotates: keys with per-channel offsets (SmolLM2's largest channel mean is about 10 times the
// channels' spread, bench/RESULTS.md) waste a plain per-row scale on the offset channels. The rotated rows,
// dequantized and rotated back, are nearer the appended keys than the same rows quantized unrotated (the
// quantization's definition, in float64 here) by more than half.
TEST(Int8Cache, RotationCutsTheErrorOfKeysWithChannelOffsets) {
  torch::manual_seed(9);
  const int64_t d = 64, T = 200;
  torch::Tensor offsets = torch::zeros({d}, torch::kFloat64);
  offsets[3] = 12.0, offsets[40] = -9.0, offsets[17] = 6.0;
  const torch::Tensor keys = (torch::randn({1, 2, T, d}, torch::kFloat64) + offsets).to(torch::kFloat32);
  KVCache cache(KVCacheOptions(1, 1, 2, d, T).dtype(torch::kInt8));
  cache.append(0, keys, keys);
  const torch::Tensor k64 = keys.to(torch::kFloat64);
  const double rotated_error =
      (int8_rows_in_model_basis(cache.keys(0), cache.key_scales(0)) - k64).pow(2).mean().sqrt().item<double>();
  const torch::Tensor plain_scales = std::get<0>(k64.abs().max(-1, /*keepdim=*/true)) / 127.0;
  const double plain_error = ((k64 / plain_scales).round() * plain_scales - k64).pow(2).mean().sqrt().item<double>();
  std::cout << "[ info ] RMS error of keys with channel offsets: rotated rows " << rotated_error << ", unrotated "
            << plain_error << "\n";
  EXPECT_LT(rotated_error, 0.5 * plain_error);
}

// Through attention_with_kv_cache, whose query goes in rotated and whose output comes back rotated: an int8
// cache gives what a float32 cache holding its rows in the model's basis (support.h's float64 rotation back)
// gives, with every variant on (window, softcap, ALiBi, sinks), for float32 and bfloat16 queries, several
// queries per row, ragged rows and GQA. Head size 40 rotates in blocks of 8.
TEST(Int8Cache, AttentionOverTheRotatedRowsIsAFloatCacheOfTheirRows) {
  torch::NoGradGuard no_grad;
  for (int64_t d : {64, 40}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    torch::manual_seed(21);
    const int64_t B = 2, H = 6, H_kv = 2, L = 700, tq = 3;
    const std::vector<int64_t> counts = {700, 450};
    torch::Tensor offsets = torch::zeros({d});
    offsets[1] = 8.0, offsets[d - 3] = -5.0;  // keys with offset channels, as a model's carry
    const torch::Tensor k = torch::randn({B, H_kv, L, d}) + offsets, v = torch::randn({B, H_kv, L, d});
    KVCache int8(KVCacheOptions(1, B, H_kv, d, L).dtype(torch::kInt8));
    int8.append(0, k, v, counts);
    KVCache plain(KVCacheOptions(1, B, H_kv, d, L));
    plain.append(0, int8_rows_in_model_basis(int8.keys(0), int8.key_scales(0)).to(torch::kFloat32),
                 int8_rows_in_model_basis(int8.values(0), int8.value_scales(0)).to(torch::kFloat32), counts);
    const auto options = SdpaOptions()
                             .causal(true)
                             .scale(0.2)
                             .window(100, 0)
                             .softcap(30.0)
                             .alibi_slopes(torch::rand({H}) * 0.1)
                             .sinks(torch::randn({H}));
    const torch::Tensor starts = longs({700 - tq, 450 - tq});
    const torch::Tensor q = torch::randn({B, H, tq, d});
    const torch::Tensor expected = attention_with_kv_cache(q, plain, 0, starts, options).to(torch::kFloat64);
    for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(c10::toString(dtype));
      const torch::Tensor query = q.to(dtype);
      const torch::Tensor out = attention_with_kv_cache(query, int8, 0, starts, options);
      EXPECT_EQ(out.scalar_type(), dtype);
      // float32: the dot route's int16 rounding (2e-4, as the kernel tests); bfloat16: the query's own rounding.
      EXPECT_CLOSE(out.to(torch::kFloat64),
                   dtype == torch::kFloat32 ? expected
                                            : attention_with_kv_cache(query.to(torch::kFloat32), plain, 0, starts,
                                                                      options).to(torch::kFloat64),
                   dtype == torch::kFloat32 ? 2e-4 : tolerance(torch::kBFloat16));
    }
  }
}

// The smallest float rows (subnormal) keep their shape: 127 / max|r| overflows float, so it is taken in double.
// The row [1e-38, 1e-40, 0, -5e-39] rotates (H of 4) to r = [0.255, 0.745, 0.755, 0.245] · 1e-38, about.
TEST(Int8Cache, SubnormalRowsKeepTheirRatios) {
  KVCache cache(KVCacheOptions(1, 1, 1, 4, 2).dtype(torch::kInt8));
  const torch::Tensor tiny = torch::tensor({1e-38f, 1e-40f, 0.0f, -5e-39f}).view({1, 1, 1, 4});
  cache.append(0, tiny, tiny);
  const torch::Tensor r = torch::matmul(tiny.to(torch::kFloat64), float64_hadamard(4)).flatten();
  const double amax = r.abs().max().item<double>();
  ASSERT_GT(127.0 / amax, static_cast<double>(std::numeric_limits<float>::max()));  // the case this test is for
  const torch::Tensor expected = (r * (127.0 / amax)).round();
  EXPECT_TRUE(torch::equal(cache.keys(0)[0][0][0].to(torch::kFloat64), expected))
      << cache.keys(0)[0][0][0] << " against " << expected;
  EXPECT_EQ(expected[2].item<double>(), 127.0);
  EXPECT_GT(expected[0].item<double>(), 30.0);  // no element lost to the range
  // A subnormal scale, in steps of 1.4e-45.
  EXPECT_NEAR(cache.key_scales(0)[0][0][0].item<float>() * 127.0, amax, 2e-43);
}

// Right padding is never stored, so whatever it holds (NaN from a padded prompt's projections, say) is not
// refused: a ragged append stores what the same rows with zero padding store, in a KVCache and a PagedKVCache.
TEST(Int8Cache, RaggedAppendIgnoresWhatItsPaddingHolds) {
  torch::manual_seed(41);
  const torch::Tensor k = torch::randn({2, 2, 4, 8}), v = torch::randn({2, 2, 4, 8});
  const std::vector<int64_t> counts = {2, 3};
  torch::Tensor k_nan = k.clone(), v_inf = v.clone();
  k_nan[0].narrow(1, 2, 2).fill_(NAN);
  v_inf[1].narrow(1, 3, 1).fill_(INFINITY);
  KVCache padded(KVCacheOptions(1, 2, 2, 8, 6).dtype(torch::kInt8)), clean(KVCacheOptions(1, 2, 2, 8, 6).dtype(torch::kInt8));
  padded.append(0, k_nan, v_inf, counts);
  clean.append(0, k, v, counts);
  EXPECT_TRUE(torch::equal(padded.keys(0), clean.keys(0)));
  EXPECT_TRUE(torch::equal(padded.values(0), clean.values(0)));
  EXPECT_TRUE(torch::equal(padded.key_scales(0), clean.key_scales(0)));
  EXPECT_TRUE(torch::equal(padded.value_scales(0), clean.value_scales(0)));
  PagedKVCache paged(PagedKVCacheOptions(1, 2, 8, 4, 4).dtype(torch::kInt8));
  const std::vector<int64_t> sequences = {paged.add_sequence(), paged.add_sequence()};
  paged.append(0, sequences, k_nan, v_inf, counts);
  EXPECT_EQ(paged.batch(0, sequences).lengths[1].item<int64_t>(), 3);
  EXPECT_TRUE(torch::isfinite(paged.key_scales(0)).all().item<bool>());
}

TEST(Int8Cache, RefusesWhatItCannotStoreAndLeavesItselfAsItWas) {
  KVCache cache(KVCacheOptions(1, 1, 2, 8, 4).dtype(torch::kInt8));
  cache.append(0, torch::ones({1, 2, 2, 8}), torch::ones({1, 2, 2, 8}));
  const torch::Tensor keys = cache.keys(0).clone(), scales = cache.key_scales(0).clone();
  torch::Tensor bad = torch::ones({1, 2, 1, 8});
  bad[0][1][0][3] = std::nan("");
  EXPECT_ERROR_CONTAINS(cache.append(0, bad, torch::ones({1, 2, 1, 8})), "key holds a non-finite value");
  bad[0][1][0][3] = INFINITY;
  EXPECT_ERROR_CONTAINS(cache.append(0, torch::ones({1, 2, 1, 8}), bad), "value holds a non-finite value");
  EXPECT_ERROR_CONTAINS(cache.append(0, torch::ones({1, 2, 1, 8}, torch::kInt32), torch::ones({1, 2, 1, 8})),
                        "takes float32, float64, bfloat16 or float16");
  EXPECT_EQ(cache.lengths(0)[0].item<int64_t>(), 2);
  EXPECT_TRUE(torch::equal(cache.keys(0), keys));
  EXPECT_TRUE(torch::equal(cache.key_scales(0), scales));
  EXPECT_FALSE(KVCache(KVCacheOptions(1, 1, 2, 8, 4)).key_scales(0).defined());
  torch::Tensor huge = torch::ones({1, 2, 1, 8}, torch::kFloat64);
  huge[0][0][0][1] = 1e300;  // finite in float64, beyond float32's scales
  EXPECT_ERROR_CONTAINS(cache.append(0, huge, torch::ones({1, 2, 1, 8})), "beyond float32's range");
  // Finite float32 rows whose rotation is not: 8 elements of 3e38 rotate to 8.5e38 in their first element.
  EXPECT_ERROR_CONTAINS(cache.append(0, torch::ones({1, 2, 1, 8}), torch::full({1, 2, 1, 8}, 3e38f)),
                        "value holds a non-finite value, or a row whose rotation (hadamard_rows) has an element "
                        "beyond float32's range");
  // And a float64 row beyond float32's range whose rotation is within it: one element of 4e38 rotates to
  // 4e38 / sqrt(8) = 1.4e38 in each of the 8 places, and is stored.
  torch::Tensor spread = torch::zeros({1, 2, 1, 8}, torch::kFloat64);
  spread[0][0][0][0] = 4e38, spread[0][1][0][0] = 4e38;
  cache.append(0, spread, torch::ones({1, 2, 1, 8}));
  EXPECT_EQ(cache.lengths(0)[0].item<int64_t>(), 3);
  EXPECT_NEAR(cache.key_scales(0)[0][0][2].item<float>() * 127.0 / (4e38 / std::sqrt(8.0)), 1.0, 1e-6);
  cache.truncate(2);
  EXPECT_EQ(cache.lengths(0)[0].item<int64_t>(), 2);
  EXPECT_ERROR_CONTAINS(KVCache(KVCacheOptions(1, 1, 2, 8, 4).dtype(torch::kInt32)), "float16 or int8, got Int");
}

struct Int8Param {
  ops::cpu::Capability capability;
  torch::Dtype query_dtype;
  ops::cpu::Int8Products products = ops::cpu::Int8Products::Widen;  // the AVX-512 variant's int8 products
};

bool takes_dot(const Int8Param& p) { return p.products == ops::cpu::Int8Products::Dot; }

void PrintTo(const Int8Param& p, std::ostream* os) {
  *os << ops::cpu::capability_name(p.capability) << " " << c10::toString(p.query_dtype)
      << (takes_dot(p) ? " int8 dot" : "");
}

std::string int8_param_name(const ::testing::TestParamInfo<Int8Param>& info) {
  return std::string(ops::cpu::capability_name(info.param.capability)) + "_" +
         c10::toString(info.param.query_dtype) + (takes_dot(info.param) ? "_int8_dot" : "");
}

class Int8DecodeKernel : public ::testing::TestWithParam<Int8Param> {
 protected:
  void SetUp() override {
    if (takes_dot(GetParam()) && (!ops::cpu::hardware_has_int8_dot() ||
                                  ops::cpu::hardware_capability_limit() < ops::cpu::Capability::Avx512)) {
      GTEST_SKIP() << "skipped: the int8 dot products need AVX-512 with AVX512-VNNI, which this CPU (or build, "
                      "or ATTN_CPU_CAPABILITY) does not give";
    }
    scope_ = std::make_unique<CapabilityScope>(GetParam().capability);
    ops::cpu::force_int8_products(GetParam().products);
    // The case runs the route it names (the environment cannot have lowered it).
    ASSERT_EQ(cpu_kernel_info().int8_products, takes_dot(GetParam()) ? "dot" : "widen");
  }
  void TearDown() override {
    scope_.reset();
    ops::cpu::reset_int8_products();
  }

  /// The float32 tolerance against float64: the dot products round the query and the weights to int16, which
  /// moves a product by at most 1/65534 of its row's largest term (products/int8_dot.h); measured up to 8.2e-5 of
  /// the output's scale in these cases, widened elements 1e-6.
  double float_tolerance() const { return takes_dot(GetParam()) ? 2e-4 : tolerance(torch::kFloat32); }

 private:
  std::unique_ptr<CapabilityScope> scope_;
};

struct Int8Case {
  int64_t heads, kv_heads, tq;
  std::vector<int64_t> lengths;  // capacity: the largest + 3
  bool causal;
  int64_t dk, dv;
};

// The head sizes take the int8 loads' two-vector, one-vector and scalar steps on every variant (16, 24, 40,
// 64, 72, 128), and the dot products' sizes (d_k 64, 128, 256; d_v 32, 64, 128) with tiles of 1 to 4 packed
// rows; lengths cross the splits (1024 keys for int8); groups of 1 to 8 query heads per cache head; Tq from 1 to
// 40, past the decode kernel's 16 (an int8 cache is read by the decode kernel at any Tq).
const std::vector<Int8Case> kInt8Cases = {
    {4, 1, 1, {1}, true, 16, 16},          {8, 2, 1, {1000}, true, 128, 128}, {6, 3, 1, {257, 3}, true, 40, 40},
    {8, 8, 3, {513, 77}, true, 64, 24},    {2, 2, 4, {9, 600}, false, 128, 72}, {8, 1, 1, {700}, false, 24, 40},
    {4, 2, 40, {300, 45}, true, 64, 64},  {4, 2, 2, {2100, 1030}, true, 256, 32},
    {3, 1, 1, {1000, 77}, true, 64, 64},   {2, 1, 1, {1030, 5}, false, 128, 32},
};

TEST_P(Int8DecodeKernel, MatchesFloat64AttentionOverTheDequantizedRows) {
  const torch::Dtype dtype = GetParam().query_dtype;
  uint64_t seed = 70;
  for (const Int8Case& c : kInt8Cases) {
    const int64_t B = static_cast<int64_t>(c.lengths.size());
    const int64_t capacity = *std::max_element(c.lengths.begin(), c.lengths.end()) + 3;
    SCOPED_TRACE(::testing::Message() << "H=" << c.heads << " H_kv=" << c.kv_heads << " Tq=" << c.tq
                                      << " first length " << c.lengths[0] << " dk=" << c.dk << " dv=" << c.dv);
    torch::manual_seed(++seed);
    const torch::Tensor kc = torch::randint(-127, 128, {B, c.kv_heads, capacity, c.dk}).to(torch::kInt8);
    const torch::Tensor vc = torch::randint(-127, 128, {B, c.kv_heads, capacity, c.dv}).to(torch::kInt8);
    const torch::Tensor ks = torch::rand({B, c.kv_heads, capacity}) * 0.02 + 0.001;
    const torch::Tensor vs = torch::rand({B, c.kv_heads, capacity}) * 0.05;
    const torch::Tensor q = torch::randn({B, c.heads, c.tq, c.dk}).to(dtype);
    std::vector<int64_t> starts;
    for (int64_t l : c.lengths) starts.push_back(std::max<int64_t>(l - c.tq, 0));
    const int64_t group = c.heads / c.kv_heads;
    const torch::Tensor expected = std::get<0>(float64_attention(
        q.to(torch::kFloat64), dequantized(kc, ks).repeat_interleave(group, 1),
        dequantized(vc, vs).repeat_interleave(group, 1), cache_allowed_pairs(starts, c.lengths, c.tq, capacity, c.causal),
        1.0 / std::sqrt(double(c.dk))));
    const torch::Tensor out =
        ops::decode_attention(q, kc, vc, longs(starts), longs(c.lengths), c.causal, c10::nullopt, -1, -1, 0.0,
                              c10::nullopt, c10::nullopt, ks, vs);
    ASSERT_EQ(out.scalar_type(), dtype);
    EXPECT_CLOSE(out.to(torch::kFloat64), expected, dtype == torch::kBFloat16 ? tolerance(dtype) : float_tolerance());
  }
}

// The variants (window, softcap, ALiBi, sinks) on an int8 cache give what they give on a float32 cache that
// holds the same dequantized rows (itself checked against float64 in test_variants.cpp).
TEST_P(Int8DecodeKernel, VariantsMatchAFloatCacheOfTheSameRows) {
  torch::manual_seed(5);
  const int64_t B = 2, H = 6, H_kv = 2, L = 700, d = 64;
  const torch::Tensor kc = torch::randint(-127, 128, {B, H_kv, L, d}).to(torch::kInt8);
  const torch::Tensor vc = torch::randint(-127, 128, {B, H_kv, L, d}).to(torch::kInt8);
  const torch::Tensor ks = torch::rand({B, H_kv, L}) * 0.02, vs = torch::rand({B, H_kv, L}) * 0.05;
  const torch::Tensor q = torch::randn({B, H, 3, d});
  const torch::Tensor slopes = torch::rand({H}) * 0.1, sinks = torch::randn({H});
  const torch::Tensor query = q.to(GetParam().query_dtype);
  const auto run = [&](const torch::Tensor& query, const torch::Tensor& k, const torch::Tensor& v,
                       const c10::optional<torch::Tensor>& k_scales, const c10::optional<torch::Tensor>& v_scales) {
    return ops::decode_attention(query, k, v, longs({400, 690}), longs({403, 693}), true, 0.2, 100, 0, 30.0, slopes,
                                 sinks, k_scales, v_scales)
        .to(torch::kFloat64);
  };
  // The float cache's query: the same values in float32 (a float32 cache is read by a float32 query).
  const torch::Tensor expected = run(query.to(torch::kFloat32), dequantized(kc, ks).to(torch::kFloat32),
                                     dequantized(vc, vs).to(torch::kFloat32), c10::nullopt, c10::nullopt);
  const torch::Tensor int8 = run(query, kc, vc, ks, vs);
  EXPECT_CLOSE(int8, expected, GetParam().query_dtype == torch::kBFloat16 ? tolerance(torch::kBFloat16) : float_tolerance());
}

// The dot products' int32 sums at their limits: every key and value element -128 against a query whose elements
// all round to 32767, d_k = 256, two splits, against float64, and a query and value scales too small to round;
// then a NaN in a query row and an infinite value
// scale, which the dot products hand back to widening: a NaN row for that head only (its group then widens, so
// the other heads match within the tolerance, not bitwise), and -inf everywhere (every value is -128 times a
// positive scale) as float64 gives.
TEST_P(Int8DecodeKernel, ExtremeElementsAndNonFiniteInputs) {
  torch::manual_seed(9);
  const int64_t H = 4, L = 2100, d = 256;
  const torch::Tensor kc = torch::full({1, 1, L, d}, -128, torch::kInt8);
  const torch::Tensor vc = torch::full({1, 1, L, d}, -128, torch::kInt8);
  const torch::Tensor ks = torch::rand({1, 1, L}) * 0.0001 + 0.00001, vs = torch::rand({1, 1, L}) * 0.01;
  const torch::Tensor q = torch::full({1, H, 1, d}, 4.0).to(GetParam().query_dtype);
  const auto check = [&](const torch::Tensor& query, const torch::Tensor& value_scales) {
    const torch::Tensor expected = std::get<0>(float64_attention(
        query.to(torch::kFloat64), dequantized(kc, ks).expand({1, H, L, d}),
        dequantized(vc, value_scales).expand({1, H, L, d}), cache_allowed_pairs({L - 1}, {L}, 1, L, true),
        1.0 / std::sqrt(double(d))));
    const torch::Tensor out = ops::decode_attention(query, kc, vc, longs({L - 1}), longs({L}), true, c10::nullopt,
                                                    -1, -1, 0.0, c10::nullopt, c10::nullopt, ks, value_scales);
    EXPECT_CLOSE(out.to(torch::kFloat64), expected,
                 GetParam().query_dtype == torch::kBFloat16 ? tolerance(torch::kBFloat16) : float_tolerance());
    return out;
  };
  const torch::Tensor clean = check(q, vs);
  // A NaN in head 1's query: its row is NaN (as IEEE arithmetic gives on a float cache); the other heads keep
  // the results checked above.
  torch::Tensor nan_query = q.clone();
  nan_query[0][1][0][5] = std::nan("");
  const torch::Tensor with_nan = ops::decode_attention(nan_query, kc, vc, longs({L - 1}), longs({L}), true,
                                                       c10::nullopt, -1, -1, 0.0, c10::nullopt, c10::nullopt, ks, vs);
  EXPECT_TRUE(with_nan[0][1].isnan().all().item<bool>());
  const double tol = GetParam().query_dtype == torch::kBFloat16 ? tolerance(torch::kBFloat16) : float_tolerance();
  for (int64_t h : {0, 2, 3}) EXPECT_CLOSE(with_nan[0][h], clean[0][h], tol) << "head " << h;
  // A query and value scales so small that their int16 scales would be subnormal (widened): float64's result.
  check(torch::full({1, H, 1, d}, 2e-38).to(GetParam().query_dtype), vs);
  check(q, vs * 1e-33);
  torch::Tensor infinite = vs.clone();
  infinite[0][0][7] = INFINITY;
  EXPECT_TRUE(check(q, infinite).isinf().all().item<bool>());
}

// The int8 products are chosen once per call: the dot products on the AVX-512 variant where the CPU has
// AVX512-VNNI (unless forced to widen), widening everywhere else; cpu_kernel_info() says which.
TEST(Int8Products, KernelInfoSaysWhichProductsRun) {
  {
    CapabilityScope avx2(ops::cpu::Capability::Avx2);
    EXPECT_FALSE(ops::cpu::int8_dot_route_chosen());
    EXPECT_EQ(cpu_kernel_info().int8_products, "widen");
  }
  if (!ops::cpu::hardware_has_int8_dot() || ops::cpu::hardware_capability_limit() < ops::cpu::Capability::Avx512) {
    std::printf("[ NOTE     ] the int8 dot products need AVX-512 with AVX512-VNNI, which this CPU (or build, or "
                "ATTN_CPU_CAPABILITY) does not give: only widening was checked\n");
    EXPECT_FALSE(ops::cpu::int8_dot_route_chosen());
    return;
  }
  CapabilityScope avx512(ops::cpu::Capability::Avx512);
  const char* env = std::getenv("ATTN_INT8_PRODUCTS");
  const bool widen_by_default = env && std::string(env) == "widen";
  EXPECT_EQ(ops::cpu::int8_dot_route_chosen(), !widen_by_default);
  ops::cpu::force_int8_products(ops::cpu::Int8Products::Dot);
  EXPECT_TRUE(ops::cpu::int8_dot_route_chosen());
  EXPECT_EQ(cpu_kernel_info().int8_products, "dot");
  EXPECT_NE(cpu_kernel_info().summary.find("AVX512-VNNI dot products"), std::string::npos) << cpu_kernel_info().summary;
  ops::cpu::force_int8_products(ops::cpu::Int8Products::Widen);
  EXPECT_FALSE(ops::cpu::int8_dot_route_chosen());
  EXPECT_EQ(cpu_kernel_info().int8_products, "widen");
  ops::cpu::reset_int8_products();
}

std::vector<Int8Param> int8_grid() {
  std::vector<Int8Param> grid;
  for (auto c : {ops::cpu::Capability::Default, ops::cpu::Capability::Avx2, ops::cpu::Capability::Avx512}) {
    for (torch::Dtype d : {torch::kFloat32, torch::kBFloat16}) grid.push_back({c, d});
  }
  for (torch::Dtype d : {torch::kFloat32, torch::kBFloat16}) {
    grid.push_back({ops::cpu::Capability::Avx512, d, ops::cpu::Int8Products::Dot});
  }
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Variants, Int8DecodeKernel, ::testing::ValuesIn(int8_grid()), int8_param_name);

TEST(Int8Cache, TheOpRefusesMismatchedCachesAndScalesClearly) {
  const torch::Tensor q = torch::randn({1, 2, 1, 8});
  const torch::Tensor k8 = torch::zeros({1, 2, 5, 8}, torch::kInt8);
  const torch::Tensor s = torch::ones({1, 2, 5});
  const auto call = [&](const torch::Tensor& query, const torch::Tensor& k, const torch::Tensor& v,
                        const c10::optional<torch::Tensor>& ks, const c10::optional<torch::Tensor>& vs) {
    return ops::decode_attention(query, k, v, longs({2}), longs({3}), true, c10::nullopt, -1, -1, 0.0, c10::nullopt,
                                 c10::nullopt, ks, vs);
  };
  EXPECT_ERROR_CONTAINS(call(q, k8, k8, c10::nullopt, s), "an int8 cache needs key_scales [B, H_kv, capacity] = [1, 2, 5]");
  EXPECT_ERROR_CONTAINS(call(q, k8, k8, s, torch::ones({1, 2, 4})),
                        "value_scales must be [B, H_kv, capacity] = [1, 2, 5], got [1, 2, 4]");
  EXPECT_ERROR_CONTAINS(call(q, k8, k8, s, s.to(torch::kFloat64)), "value_scales must be float32");
  EXPECT_ERROR_CONTAINS(call(q, k8, torch::zeros({1, 2, 5, 8}), s, s), "must both be int8 or neither");
  EXPECT_ERROR_CONTAINS(call(q.to(torch::kFloat64), k8, k8, s, s), "read by a float32 or bfloat16 query, got Double");
  EXPECT_ERROR_CONTAINS(call(q, torch::zeros({1, 2, 5, 8}), torch::zeros({1, 2, 5, 8}), s, c10::nullopt),
                        "key_scales is given only with an int8 cache");
}

TEST(Int8Cache, FunctionalAndModuleRefuseWhatTheDecodeKernelCannotDo) {
  KVCache cache(KVCacheOptions(1, 1, 2, 8, 8).dtype(torch::kInt8));
  cache.append(0, torch::randn({1, 2, 3, 8}), torch::randn({1, 2, 3, 8}));
  const torch::Tensor q = torch::randn({1, 4, 1, 8});
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(q, cache, 0, longs({2}), SdpaOptions().backend(Backend::Math)),
                        "read by attn's decode kernel only (Backend::Auto or Backend::Fused), not by Backend::Math");
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(q, cache, 0, longs({2}), SdpaOptions().dropout(0.1)),
                        "dropout must be 0");
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(q.clone().requires_grad_(), cache, 0, longs({2})),
                        "computes no gradient");
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(q, cache, 1, longs({2})),
                        "attn::attention_with_kv_cache: layer must be in [0, 1) (the cache's layers), got 1");
  EXPECT_ERROR_CONTAINS(attention_with_kv_cache(q, cache.keys(0), cache.values(0), longs({2}), cache.lengths(0)),
                        "an int8 cache needs key_scales");

  MultiHeadAttention mha(MultiHeadAttentionOptions(32, 4).num_kv_heads(2));
  KVCache for_mha(KVCacheOptions(1, 1, 2, 8, 8).dtype(torch::kInt8));
  const torch::Tensor x = torch::randn({1, 3, 32});
  // With a gradient: refused before the cache changes.
  EXPECT_ERROR_CONTAINS(mha->forward_with_cache(x, for_mha, 0), "computes no gradient");
  EXPECT_EQ(for_mha.lengths(0)[0].item<int64_t>(), 0);
  torch::NoGradGuard no_grad;
  mha->to(torch::kFloat64);
  EXPECT_ERROR_CONTAINS(mha->forward_with_cache(x.to(torch::kFloat64), for_mha, 0),
                        "an int8 cache serves a float32 or bfloat16 model on the CPU, but x is Double");
  mha->to(torch::kFloat32);
  EXPECT_EQ(mha->forward_with_cache(x, for_mha, 0).sizes(), x.sizes());
  EXPECT_EQ(for_mha.lengths(0)[0].item<int64_t>(), 3);
}

// Decoding token by token through MultiHeadAttention: an int8 cache stays within its quantization error of
// the cache-less float64 forward, at most a few times the error of a bfloat16 cache on a bfloat16 model.
TEST(Int8Cache, ModuleDecodingStaysCloseToTheFloat64Forward) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const int64_t E = 256, H = 4, H_kv = 2, T = 40;  // head size 64, as SmolLM2's
  MultiHeadAttention mha(MultiHeadAttentionOptions(E, H).num_kv_heads(H_kv).causal(true));
  const torch::Tensor x = torch::randn({2, T, E});
  mha->to(torch::kFloat64);
  const torch::Tensor x64 = x.to(torch::kFloat64);
  const torch::Tensor expected = mha->forward(x64, x64, x64);
  const auto decode = [&](torch::Dtype model, torch::Dtype cache_dtype) {
    mha->to(model);
    KVCache cache(KVCacheOptions(1, 2, H_kv, E / H, T).dtype(cache_dtype));
    std::vector<torch::Tensor> steps = {mha->forward_with_cache(x.narrow(1, 0, 8).to(model), cache, 0)};
    for (int64_t t = 8; t < T; ++t) steps.push_back(mha->forward_with_cache(x.narrow(1, t, 1).to(model), cache, 0));
    return (torch::cat(steps, 1).to(torch::kFloat64) - expected).abs().max().item<double>();
  };
  const double int8_f32 = decode(torch::kFloat32, torch::kInt8);
  const double int8_bf16 = decode(torch::kBFloat16, torch::kInt8);
  const double bf16_bf16 = decode(torch::kBFloat16, torch::kBFloat16);
  const double scale = expected.abs().max().item<double>();
  EXPECT_LT(int8_f32, 2e-2 * scale);
  EXPECT_LT(int8_bf16, 2.0 * bf16_bf16) << "int8 " << int8_bf16 << " bfloat16 " << bf16_bf16;
  std::cout << "[ info ] largest error against the float64 forward: int8 cache, float32 model " << int8_f32
            << "; int8 cache, bfloat16 model " << int8_bf16 << "; bfloat16 cache and model " << bf16_bf16
            << " (outputs up to " << scale << ")\n";
}

// A prompt into empty rows of an int8 cache attends over its own keys and values as computed, however it comes:
// whole, ragged (new_lengths: right padding) or one token. Its outputs are the float model's to float32's
// rounding, where a read of the int8 rows it appended would be off by the quantization (~1e-2 here).
TEST(Int8Cache, APromptIntoEmptyRowsAttendsOverItsOwnRowsAsComputed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const int64_t E = 64, H = 4, T = 12;
  MultiHeadAttention mha(
      MultiHeadAttentionOptions(E, H).num_kv_heads(2).causal(true).rotary(RotaryEmbeddingOptions(16)));
  mha->to(torch::kFloat64);
  const torch::Tensor x = torch::randn({2, T, E}, torch::kFloat64);
  const std::vector<int64_t> lengths = {T, 5};
  for (const std::vector<int64_t>& new_lengths : {std::vector<int64_t>{}, lengths}) {
    for (int64_t t : {T, int64_t{1}}) {
      SCOPED_TRACE(::testing::Message() << "T " << t << (new_lengths.empty() ? "" : ", ragged"));
      if (t == 1 && !new_lengths.empty()) continue;
      mha->to(torch::kFloat32);
      KVCache cache(mha->cache_options(1, 2, T).dtype(torch::kInt8));
      const torch::Tensor prompt = x.narrow(1, 0, t);
      const torch::Tensor out = mha->forward_with_cache(prompt.to(torch::kFloat32), cache, 0, new_lengths);
      mha->to(torch::kFloat64);
      for (int64_t b = 0; b < 2; ++b) {  // each row alone, over its own positions, in float64
        const int64_t n = new_lengths.empty() ? t : new_lengths[b];
        const torch::Tensor row = prompt.narrow(0, b, 1).narrow(1, 0, n);
        EXPECT_CLOSE(out.narrow(0, b, 1).narrow(1, 0, n).to(torch::kFloat64), mha->forward(row, row, row), 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace attn::test
