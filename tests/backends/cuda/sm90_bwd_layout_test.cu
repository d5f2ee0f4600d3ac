// The register layouts the sm90 backward's transposed scores rest on (src/backends/cuda/sm90/bwd_kernel.cuh,
// BwdTraits::kScoresT), checked on the CPU with CuTe's own partitions, for D = 64, 96 and 128 and every consumer
// thread:
//   - acc_as_a_operand: each element of S^T's accumulator is, as the register A operand of dV = P^T dO and
//     dK = dS^T Q, the same (key, query) that the products' partition of their A operand expects there;
//   - the LSE and D pairs: accumulator elements 4j and 4j + 1 are two adjacent queries, the first even (one
//     8-byte load), and 4j + 2, 4j + 3 the same queries eight keys on (so one pair serves four elements);
//   - dQ's view of the stored dS^T (SmemLayoutDsForDq) is its transpose: (query, key) at the address the
//     stmatrix of (key, query) wrote.
// And for every head dim, whose dQ is added from registers in the fragment order (sm80/dq_accum.hpp): the four
// accumulator elements 4j .. 4j + 3 of every thread are rows g and g + 8 of its warp's 16-row band, columns 2t
// and 2t + 1 of 8-column block j (lane 4g + t), the order of one fragment. And the deterministic mode's order of
// dQ's additions (check_turn_order) and the steps' order (check_step_order); at D = 256, where dK and dV are staged
// in the last step's Q and dO buffers (check_kv_out_in_stage).
// Host code only: built with nvcc by .ci/run and run there, no GPU needed. Exit status 1 on the first mismatch.
#include <cstdio>
#include <vector>

#include "backends/cuda/sm90/bwd_kernel.cuh"

namespace {

using namespace cute;

template <int kHeadDim>
bool check_head_dim() {
  using Traits = flashtile::cuda::sm90::BwdTraits<cutlass::bfloat16_t, kHeadDim>;
  static_assert(Traits::kScoresT, "the transposed scores' head dims");
  using M = typename Traits::M;
  using N = typename Traits::N;
  using HalfN = typename Traits::HalfN;
  typename Traits::MmaSdP mma_sdp;
  typename Traits::MmaKV mma_kv;
  for (int tid = 0; tid < 128; ++tid) {
    // S^T's accumulator: (a consumer's 64 keys, kBlockM queries); dV's and dK's A operand: (64 keys, kBlockM
    // queries) too, as (M, K).
    auto tScS = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<HalfN, M>{}));
    auto tAcA = mma_kv.get_thread_slice(tid).partition_A(make_identity_tensor(Shape<HalfN, M>{}));
    auto element = make_tensor<int>(shape(tScS));  // element e of the accumulator holds e
    for (int e = 0; e < size(element); ++e) element(e) = e;
    auto as_a = flashtile::cuda::sm90::acc_as_a_operand(element);
    if (size(as_a) != size(tAcA) || size<2>(as_a) != size<2>(tAcA)) {
      std::printf("D = %d: the A operand's shape differs from the accumulator's\n", kHeadDim);
      return false;
    }
    for (int kb = 0; kb < size<2>(tAcA); ++kb)
      for (int v = 0; v < size<0>(tAcA); ++v)
        if (tScS(as_a(v, 0, kb)) != tAcA(v, 0, kb)) {
          std::printf("D = %d thread %d k block %d value %d: accumulator element %d is (%d, %d), the A operand "
                      "expects (%d, %d)\n",
                      kHeadDim, tid, kb, v, as_a(v, 0, kb), int(get<0>(tScS(as_a(v, 0, kb)))),
                      int(get<1>(tScS(as_a(v, 0, kb)))), int(get<0>(tAcA(v, 0, kb))), int(get<1>(tAcA(v, 0, kb))));
          return false;
        }
    for (int j = 0; j < size(tScS) / 4; ++j) {
      const auto c = tScS(4 * j);
      const bool pair = get<1>(c) % 2 == 0 && tScS(4 * j + 1) == make_coord(get<0>(c), get<1>(c) + 1) &&
                        tScS(4 * j + 2) == make_coord(get<0>(c) + 8, get<1>(c)) &&
                        tScS(4 * j + 3) == make_coord(get<0>(c) + 8, get<1>(c) + 1);
      if (!pair) {
        std::printf("D = %d thread %d: elements %d..%d are not one query pair at two keys\n", kHeadDim, tid, 4 * j,
                    4 * j + 3);
        return false;
      }
    }
  }
  typename Traits::SmemLayoutDs stored;         // (keys, queries)
  typename Traits::SmemLayoutDsForDq for_dq;    // (queries, keys)
  for (int q = 0; q < M::value; ++q)
    for (int k = 0; k < N::value; ++k)
      if (for_dq(q, k) != stored(k, q)) {
        std::printf("D = %d: dQ's view of dS^T at (query %d, key %d) is offset %d, the stored (key, query) %d\n",
                    kHeadDim, q, k, int(for_dq(q, k)), int(stored(k, q)));
        return false;
      }
  std::printf("D = %d: ok\n", kHeadDim);
  return true;
}

template <int kHeadDim>
bool check_dq_fragments() {
  using Traits = flashtile::cuda::sm90::BwdTraits<cutlass::bfloat16_t, kHeadDim>;
  static_assert(Traits::kDqOrder == flashtile::cuda::sm80::DqAccumOrder::kFragment, "reductions by fragments");
  using DqCols = typename Traits::DqCols;
  typename Traits::MmaDQ mma_dq;
  for (int tid = 0; tid < 128; ++tid) {
    auto tQcQ = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<_64, DqCols>{}));
    const int lane = tid % 32, g = lane / 4, t = lane % 4;
    if (size(tQcQ) != DqCols::value / 2) return false;
    for (int block = 0; block < DqCols::value / 8; ++block)
      for (int k = 0; k < 4; ++k) {
        const auto want = make_coord(16 * (tid / 32) + g + 8 * (k / 2), 8 * block + 2 * t + k % 2);
        if (tQcQ(4 * block + k) != want) {
          std::printf("D = %d thread %d: dQ element %d is (%d, %d), the fragment order puts (%d, %d) there\n",
                      kHeadDim, tid, 4 * block + k, int(get<0>(tQcQ(4 * block + k))),
                      int(get<1>(tQcQ(4 * block + k))), int(get<0>(want)), int(get<1>(want)));
          return false;
        }
      }
  }
  std::printf("D = %d: dQ fragments ok\n", kHeadDim);
  return true;
}

// At D = 256 (BwdTraits::kKvOutFromStage) consumer w stages its dK^T (dV^T) as a (64 keys, 128 dims) box in its half
// of the columns of the last step's Q (dO) buffer, at w times the box's size from stage s's start, and the TMA
// store reads it there in the box's own layout (SmemLayoutKvOut): every element of that half must sit where the
// box's layout puts it, in every stage.
template <int kHeadDim>
bool check_kv_out_in_stage() {
  using Traits = flashtile::cuda::sm90::BwdTraits<cutlass::bfloat16_t, kHeadDim>;
  static_assert(Traits::kKvOutFromStage, "the head dims whose dK and dV are staged in the Q and dO buffers");
  const typename Traits::SmemLayoutQStages stages{};
  const typename Traits::SmemLayoutKvOut box{};
  const int box_size = cosize(box), stage_size = cosize(typename Traits::SmemLayoutQ{});
  for (int s = 0; s < Traits::kStages; ++s)
    for (int w = 0; w < Traits::kConsumers; ++w)
      for (int key = 0; key < size<0>(box); ++key)
        for (int dim = 0; dim < size<1>(box); ++dim) {
          const int in_stage = stages(key, w * size<1>(box) + dim, s);
          const int in_box = s * stage_size + w * box_size + box(key, dim);
          if (in_stage != in_box) {
            std::printf("D = %d stage %d consumer %d: (key %d, dim %d) of the box is element %d of the stage buffers, "
                        "the box's layout puts it at %d\n", kHeadDim, s, w, key, dim, in_stage, in_box);
            return false;
          }
        }
  std::printf("D = %d: dK / dV boxes in the Q and dO stages ok\n", kHeadDim);
  return true;
}

}  // namespace

// The deterministic mode's order (bwd_kernel's ordered dQ): for every block of rows a step can start at,
// BwdTile::first_block_reaching is the first key block whose steps include it, and the blocks whose steps do are a
// range from there (each waits for the ones before it: a gap would leave a count short forever). Brute force over
// the tiles' own row ranges (first_row, end_row), under masks of every kind, with Sq above, equal to and below Sk.
template <int kBlockM, int kBlockN>
bool check_turn_order() {
  using flashtile::cuda::FwdKernelParams;
  using flashtile::cuda::sm90::BwdTile;
  struct Mask {
    bool causal;
    int left, right;  // -1: unbounded
  };
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 100, -1}, {false, -1, 40},
                        {false, 70, 20}, {true, 300, -1}, {false, 0, 0},   {false, 513, 1}};
  const int seqlens[][2] = {{1, 1}, {300, 300}, {700, 260}, {130, 900}, {1024, 1024}, {77, 513}};
  for (const Mask& m : masks)
    for (const auto& sizes : seqlens) {
      FwdKernelParams f{};
      f.seqlen_q = sizes[0], f.seqlen_k = sizes[1];
      const int unbounded = f.seqlen_q + f.seqlen_k;
      f.key_offset = f.seqlen_k - f.seqlen_q;  // bottom-right aligned (KeyRange); causal: right window 0
      f.window_left = m.left < 0 ? unbounded : m.left;
      f.window_right = m.causal ? 0 : m.right < 0 ? unbounded : m.right;
      const int n_blocks = (f.seqlen_k + kBlockN - 1) / kBlockN;
      for (int row0 = 0; row0 < f.seqlen_q; row0 += kBlockM) {
        int first = -1, last = -1;
        bool gap = false;
        for (int n = 0; n < n_blocks; ++n) {
          const int key0 = n * kBlockN;
          const bool reaches = BwdTile::first_row<kBlockM>(key0, f) <= row0 && row0 < BwdTile::end_row<kBlockN>(key0, f);
          if (!reaches) continue;
          gap |= last >= 0 && last != n - 1;
          if (first < 0) first = n;
          last = n;
        }
        if (first >= 0 && (gap || BwdTile::first_block_reaching<kBlockN>(row0, f) != first)) {
          std::printf("turn order, blocks %d x %d, Sq %d Sk %d, window (%d, %d) offset %d, rows from %d: first block "
                      "%d, formula %d%s\n", kBlockM, kBlockN, f.seqlen_q, f.seqlen_k, f.window_left, f.window_right,
                      f.key_offset, row0, first, BwdTile::first_block_reaching<kBlockN>(row0, f),
                      gap ? ", and the blocks are not a range" : "");
          return false;
        }
      }
    }
  std::printf("blocks of %d rows x %d keys: the turn order ok\n", kBlockM, kBlockN);
  return true;
}

// The steps' order (BwdTile::start_row, next_step): from its start row, a tile's steps visit every (query head of
// the group, block of rows in [first_row, end_row)) exactly once, as the producer and the consumers walk them: in
// the kernels without rotation (next_step<.., false>), and in those with it (next_step<.., true>), for a tile
// rotated or not. Brute force under the same masks and lengths as check_turn_order, groups of 1 and 3.
template <int kBlockM, int kBlockN>
bool check_step_order() {
  using flashtile::cuda::FwdKernelParams;
  using flashtile::cuda::sm90::BwdTile;
  const int windows[][3] = {{0, -1, -1}, {1, -1, -1}, {0, 100, -1}, {0, -1, 40}, {0, 70, 20}, {1, 300, -1}};
  const int seqlens[][2] = {{1, 1}, {300, 300}, {700, 260}, {130, 900}, {1024, 1024}, {77, 513}};
  for (const auto& m : windows)
    for (const auto& sizes : seqlens)
      for (const int group : {1, 3})
        for (const int mode : {0, 1, 2}) {  // no rotation in the kernel; in the kernel, tile not rotated; rotated
          const bool rotate = mode == 2;
          FwdKernelParams f{};
          f.seqlen_q = sizes[0], f.seqlen_k = sizes[1], f.group = group;
          const int unbounded = f.seqlen_q + f.seqlen_k;
          f.key_offset = f.seqlen_k - f.seqlen_q;
          f.window_left = m[1] < 0 ? unbounded : m[1];
          f.window_right = m[0] ? 0 : m[2] < 0 ? unbounded : m[2];
          for (int n = 0; n * kBlockN < f.seqlen_k; ++n) {
            BwdTile t{};
            const int key0 = n * kBlockN, per_head = BwdTile::per_head<kBlockM, kBlockN>(key0, f);
            t.row_first = BwdTile::first_row<kBlockM>(key0, f), t.row_end = BwdTile::end_row<kBlockN>(key0, f);
            t.row_start = BwdTile::start_row<kBlockM>(n, t.row_first, per_head, rotate);
            std::vector<int> seen(static_cast<size_t>(group) * per_head, 0);
            bool ok = per_head == 0 || (t.row_start >= t.row_first && t.row_start < t.row_end);
            int h = 0, row0 = t.row_start;
            for (int i = 0; ok && i < per_head * group; ++i) {
              const int block = (row0 - t.row_first) / kBlockM;
              ok = h < group && row0 >= t.row_first && row0 < t.row_end && (row0 - t.row_first) % kBlockM == 0 &&
                   seen[static_cast<size_t>(h) * per_head + block]++ == 0;
              if (mode == 0)
                t.next_step<kBlockM, false>(row0, h);
              else
                t.next_step<kBlockM, true>(row0, h);
            }
            if (!ok) {
              std::printf("step order, blocks %d x %d, Sq %d Sk %d, group %d, window (%d, %d), block %d%s: a step "
                          "repeated or outside the tile's rows\n", kBlockM, kBlockN, f.seqlen_q, f.seqlen_k, group,
                          f.window_left, f.window_right, n,
                          mode == 0 ? "" : rotate ? " rotated" : " (rotating kernel)");
              return false;
            }
          }
        }
  std::printf("blocks of %d rows x %d keys: the step order ok\n", kBlockM, kBlockN);
  return true;
}

int main() {
  const bool ok = check_head_dim<64>() & check_head_dim<96>() & check_head_dim<128>() & check_dq_fragments<64>() &
                  check_dq_fragments<96>() & check_dq_fragments<128>() & check_dq_fragments<192>() &
                  check_dq_fragments<256>() & check_kv_out_in_stage<256>() & check_turn_order<128, 128>() &
                  check_turn_order<64, 128>() & check_turn_order<64, 64>() & check_step_order<128, 128>() &
                  check_step_order<64, 128>() & check_step_order<64, 64>();
  return ok ? 0 : 1;
}
