// Runs independent tasks on CPU threads, each thread with its own workspace (fp32, or float64 for the oracle). The workspace is
// allocated before any task runs, so running out of memory is reported before any output is written.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <new>
#include <vector>

#include "flashtile/flashtile.hpp"

namespace flashtile::cpu {

// num_threads as the options give it: 0 for OpenMP's default (all cores, or OMP_NUM_THREADS), else at most the
// processors this process may run on: more would only time-slice them, and each thread has a workspace of its
// own (a request for 2^31 threads once made OpenMP abort the process).
inline int resolve_threads(int32_t requested) {
  return requested > 0 ? std::min(requested, omp_get_num_procs()) : omp_get_max_threads();
}

// task(index, workspace) for index in [0, num_tasks). Tasks are handed out dynamically (causal masks make
// their costs uneven); results never depend on which thread ran a task, so outputs are deterministic.
template <typename Elem = float, typename Task>
Status parallel_tasks(int64_t num_tasks, int32_t num_threads, int64_t workspace_elems, Task&& task) {
  if (num_tasks <= 0) return {};  // an empty batch: no workspace either (its size may follow a huge seqlen)
  const int threads = static_cast<int>(std::min<int64_t>(resolve_threads(num_threads), num_tasks));
  std::vector<Elem> workspace;
  try {
    workspace.resize(static_cast<size_t>(threads) * static_cast<size_t>(workspace_elems));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "CPU workspace: cannot allocate " +
                                          std::to_string(threads * workspace_elems * sizeof(Elem)) + " bytes"};
  }
#pragma omp parallel num_threads(threads)
  {
    // Tile GEMMs called from here must run on this thread alone. OpenBLAS sees that inside an active
    // parallel region, but a team of one is not active, and it would then spread each small GEMM over
    // every core; a nested team size of 1 tells it in both cases (and touches only this thread's setting).
    omp_set_num_threads(1);
    Elem* mine = workspace.data() + static_cast<size_t>(omp_get_thread_num()) * workspace_elems;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < num_tasks; ++i) task(i, mine);
  }
  return {};
}

}  // namespace flashtile::cpu
