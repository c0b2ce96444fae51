// The GEMM path of an FP8 or bf16 matrix whose input rows are reduced to bf16 codes
// (kernels/fp8_pairs.h: ActivationPrecision kBf16 or kFp8, the numerics DeepSeek-V3.2's reference
// code serves), for calls of kLinearGemmRows rows or more (prefill). It multiplies the same operands
// as the pair tiles: each row's codes c = q · 2^e and each weight's bf16 word (an FP8 weight's value
// · 2^-8, exact), products exact in f32, on bf16 pair products.
//
// A bf16 matrix's row o is taken as its words times 2^s_o, s_o putting the row's largest magnitude in
// [1, 2) (exact), with block scales of 1 and the outputs multiplied by 2^-s_o at the end. Weights
// below 2^-26 of the row's largest become 0 (each would add under 2^-26 of what the largest adds for
// the same input): every product then stays a normal f32 value, where the instruction sets agree.
//
// For output (r, o), per 128-wide block b of the inputs, a chain over the block's pairs (2p, 2p + 1)
// in order adds the odd product and rounds, then the even one and rounds (Bf16PairStep,
// kernels/bf16_pairs.h, the arithmetic of VDPBF16PS); the block's sum s_b then enters the total as
// total = fma(s_b, scale[o / 128, b] · 2^8, total), blocks in order, and y = total · 2^-e_r. That
// order is the same on every instruction set (AVX-512 BF16, AVX2 multiply-adds, scalar), so the
// three agree bit for bit on normal values; it differs from the small-row tiles' order (16 lane
// sums reduced at the end), as the f32 GEMM path always has.
//
// Layout: the input rows are transposed once per call into tiles of 64 rows, pairs outermost, so one
// vector holds one pair of 16 rows; each weight row is widened once per call into its pairs of words
// (with AVX-512, 32 weights per step through a word table) and a pair broadcast against the rows. A
// thread widens 48 weight rows at a time; per row tile, a slab of 256 pairs (4 blocks, 64 KiB)
// stays in cache while the 48 rows' groups of 6 outputs take it in turn, each adding the slab's
// blocks to its running totals. A thread writes only its own outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "core/tensor.h"

namespace mtpspec {

struct Fp8PairInput;  // kernels/fp8_pairs.h
class ThreadPool;

// The input rows of a pair GEMM: the codes of Fp8PairInput in natural pairs (elements 2p, 2p + 1 of
// the row in the low and high half of a word), transposed into tiles of kPairGemmTileRows rows.
inline constexpr int64_t kPairGemmTileRows = 64;
struct PairGemmInput {
  int64_t rows = 0, in = 0;
  int64_t pairs = 0;  // ⌈in / 2⌉
  int64_t tiles = 0;  // ⌈rows / 64⌉
  std::vector<uint32_t, Eigen::aligned_allocator<uint32_t>> xt;  // [tiles, pairs, 64] code pairs (rows past `rows` 0)
  std::vector<float> unscale;                                     // [rows] 2^-e
  const uint32_t* Tile(int64_t t) const { return xt.data() + t * pairs * kPairGemmTileRows; }
};

// Transposes the prepared codes of one call (PrepareFp8PairInput) into `out`, a row tile per task on
// `pool` when given.
void PreparePairGemmInput(const Fp8PairInput& codes, PairGemmInput* out, ThreadPool* pool = nullptr);

// y[r · y_stride + (o − y_col0)] for r < x.rows and o in [ob, oe): the rows times w, an F8_E4M3
// matrix (with its block scales) or a BF16 one, as the header says, on the calling thread.
void PairGemm(const PairGemmInput& x, const TensorView& w, int64_t ob, int64_t oe, float* y, int64_t y_stride,
              int64_t y_col0);

// The instruction sets PairGemm can run on; it picks the best the CPU has at run time.
enum class PairGemmIsa { kScalar, kAvx2, kAvx512Bf16 };
const char* PairGemmIsaName(PairGemmIsa isa);
// The best instruction set this CPU (and this build's compiler) offers PairGemm.
PairGemmIsa PairGemmBestIsa();
// While one lives, PairGemm on this thread runs on `isa` (at most PairGemmBestIsa()): for tests and
// benchmarks that compare the paths.
class PairGemmIsaScope {
 public:
  explicit PairGemmIsaScope(PairGemmIsa isa);
  ~PairGemmIsaScope();
  PairGemmIsaScope(const PairGemmIsaScope&) = delete;
  PairGemmIsaScope& operator=(const PairGemmIsaScope&) = delete;

 private:
  int previous_;
};

}  // namespace mtpspec
