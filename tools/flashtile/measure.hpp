// What `run` and `bench` share: putting a problem where a backend reads it, timing calls, measuring the
// extra memory a call takes, and the FLOP model of SPEC.md ("Counting work").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device.hpp"
#include "flashtile/flashtile.hpp"
#include "verify/verify.hpp"

namespace flashtile::tool {

// The views one backend reads and writes for a verify::Case: the Case's own host buffers, or device copies.
struct Placement {
  Backend chosen = Backend::kAuto;  // select_forward_backend's answer for this placement
  bool on_device = false;
  ForwardParams fwd;
  BackwardParams bwd;                      // filled when placed with_backward
  std::shared_ptr<device::Mirror> mirror;  // owns the device copies
};

// Places case `c` for `requested`:
//   cpu-*   host views;
//   cuda-*  device copies (a Status says why when the build or the machine has no CUDA);
//   auto    the device when one is present and the selectors accept the call (and its backward, when
//           with_backward) there, else the host; `note` says why the device was passed over.
// The chosen backend is select_forward_backend's; a library refusal comes back as its Status.
Status place(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out,
             std::string* note);

// Device outputs back into the Case's host buffers, so the oracle can check them; nothing to do on the host.
Status fetch_outputs(const Placement& placement, const verify::Case& c, bool with_backward);

// `n` query rows for verify::check_rows, spread over positions, heads and batch entries; the first row of the
// first head and the last row of the last head are always among them.
std::vector<verify::RowSample> spread_rows(const verify::Problem& p, int64_t n);

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

// One warm-up call, then `repeats` timed ones. Host calls are timed with steady_clock and their peak RSS is
// read around each call; device calls are timed with CUDA events. Stops at the first failing call.
Status time_calls(const std::function<Status()>& call, bool on_device, int repeats, Timing* out);

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
std::string format_mib(int64_t bytes);

}  // namespace flashtile::tool
