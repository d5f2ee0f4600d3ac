// What `run` and `bench` share: putting a problem where a backend reads it, timing calls, measuring the
// extra memory a call takes, and the FLOP model of SPEC.md ("Counting work").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashtile/flashtile.hpp"
#include "verify/device_mirror.hpp"
#include "verify/verify.hpp"

namespace flashtile::tool {

// One copy of a verify::Case's tensors, as one backend reads and writes them.
struct InputSet {
  ForwardParams fwd;
  BackwardParams bwd;                            // filled when placed with_backward
  std::shared_ptr<verify::DeviceMirror> mirror;  // owns the device copies; null on the host
};

// Where a verify::Case runs for one backend.
struct Placement {
  Backend chosen = Backend::kAuto;  // select_forward_backend's answer for this placement
  bool on_device = false;
  // Timed calls take these in turn. On the host there is one, the Case's own buffers. On the device there are
  // enough copies that no call finds its inputs still in L2 from an earlier call (BENCHMARKS.md); sets[0] is
  // the one fetch_outputs() brings back.
  std::vector<InputSet> sets;
};

// Places case `c` for `requested`:
//   cpu-*   host views;
//   cuda-*  device copies on GPU 0 (a Status says why when the build or the machine has no CUDA);
//   auto    the device when one is present and the selectors accept the call (and its backward, when
//           with_backward) there, else the host; `note` says why the device was passed over.
// The chosen backend is select_forward_backend's; a library refusal comes back as its Status.
Status place(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out,
             std::string* note);

// The device buffers of sets[0], outputs included, back into the Case's host buffers, so the oracle can check
// them; nothing to do on the host.
Status fetch_outputs(const Placement& placement);

// The thread count a CPU backend runs with for num_threads = requested (0: OpenMP's default, all cores).
int32_t resolved_threads(int32_t requested);

// ---- timing and memory ------------------------------------------------------------------------------------

struct Timing {
  double first_ms = 0;           // the warm-up call (one-time start-up included)
  std::vector<double> ms;        // the timed calls
  // Peak resident memory above what was resident before the call (host backends only; -1: not measured).
  int64_t first_extra_bytes = -1;  // the warm-up call: includes starting the thread pool and BLAS buffers
  int64_t extra_bytes = -1;        // the largest over the timed calls: what every call needs
  std::string memory_note;         // why memory was not measured, when it was not

  double median_ms() const;
  double min_ms() const;
  double max_ms() const;
};

// Timed calls after the warm-up when the command line does not say. Host calls take long enough for 5 to give
// a steady median; GPU calls are short and vary with clocks and scheduling, and BENCHMARKS.md asks for the
// median of many.
constexpr int kHostRepeats = 5;
constexpr int kDeviceRepeats = 20;

// One warm-up call, then `repeats` timed ones, each on the placement's next input set. Host calls are timed
// with steady_clock and their peak RSS is read around each call; device calls are timed with CUDA events
// (gpu::time_calls). Stops at the first failing call.
// sustained (device calls only): time them as peers.py's do_bench does (triton; BENCHMARKS.md), so that both
// sides of a comparison run at the clocks of sustained work: about 50 ms of untimed calls first, then at least
// `repeats` timed calls and at least 200 ms of them (at most kMaxSustainedCalls of each).
constexpr int kMaxSustainedCalls = 2000;
Status time_calls(const Placement& placement, const std::function<Status(const InputSet&)>& call, int repeats,
                  Timing* out, bool sustained = false);

// Makes peak-RSS readings honest for repeated calls; call once, before any large allocation. glibc serves
// blocks below its mmap threshold (128 KiB, raised after the first large free) from heap pages that stay
// resident when freed, so a repeat call reusing them would seem to need no memory. A fixed 16 KiB threshold
// gives every workspace-sized block fresh pages on every call, as on a first call; it costs a few page
// faults per call, nothing next to the call itself.
void freeze_malloc_thresholds();

// ---- FLOPs (SPEC.md, "Counting work") -----------------------------------------------------------------------

// The headline convention of published tables: 4 * B * Hq * Sq * Sk * D, halved for causal. Windows and
// Dv != D are ignored, exactly as those tables ignore them.
double headline_flops(const verify::Problem& p);
// The exact count: 2 * B * Hq * (visible (row, key) pairs) * (D + Dv), with the library's bottom-right masks.
double exact_flops(const verify::Problem& p);

// "1.23 GFLOP" / "4.56 TFLOP" and "12.3 MiB": compact human units.
std::string format_flops(double flops);
std::string format_mib(double bytes);  // past 1e9 MiB in %.3g (sizes of absurd shapes)
// A time in ms with three significant digits or more: "0.0213", "3.01", "81.2", "812"; "-" when not finite.
std::string format_ms(double ms);

}  // namespace flashtile::tool
