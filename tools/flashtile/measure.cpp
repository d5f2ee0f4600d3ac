#include "measure.hpp"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

#include "cli_options.hpp"
#include "gpu.hpp"

namespace flashtile::tool {

// ---- placement --------------------------------------------------------------------------------------------

namespace {

Status place_on_host(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out) {
  InputSet s;
  s.fwd = c.forward_params(requested);
  s.fwd.num_threads = threads;
  if (with_backward) {
    s.bwd = c.backward_params(requested);
    s.bwd.num_threads = threads;
  }
  Placement p;
  if (Status st = select_forward_backend(s.fwd, &p.chosen); !st.ok()) return st;
  p.sets.push_back(std::move(s));
  *out = std::move(p);
  return {};
}

// A copy of case `c` on GPU 0. DeviceMirror copies each host allocation once, so the backward's q, k, v, out
// and lse are the forward's device buffers: it reads what the forward wrote.
Status mirror_case(const verify::Case& c, Backend requested, bool with_backward, InputSet* out) {
  InputSet s;
  s.mirror = std::make_shared<verify::DeviceMirror>();
  s.fwd = c.forward_params(requested);
  std::vector<std::tuple<const char*, const verify::HostTensor*, Tensor*>> tensors = {
      {"q", &c.q, &s.fwd.q}, {"k", &c.k, &s.fwd.k}, {"v", &c.v, &s.fwd.v}, {"out", &c.out, &s.fwd.out},
      {"lse", &c.lse, &s.fwd.lse}};
  if (with_backward) {
    s.bwd = c.backward_params(requested);
    tensors.insert(tensors.end(), {{"q", &c.q, &s.bwd.q}, {"k", &c.k, &s.bwd.k}, {"v", &c.v, &s.bwd.v},
                                   {"out", &c.out, &s.bwd.out}, {"lse", &c.lse, &s.bwd.lse},
                                   {"dout", &c.dout, &s.bwd.dout}, {"dq", &c.dq, &s.bwd.dq},
                                   {"dk", &c.dk, &s.bwd.dk}, {"dv", &c.dv, &s.bwd.dv}});
  }
  for (const auto& [name, host, view] : tensors) {
    *view = s.mirror->view(*host);
    // DeviceMirror::view hands back the host view when the device copy fails.
    if (host->storage() && view->device != Device::kCUDA)
      return {StatusCode::kDeviceError, std::string("copying ") + name + " to the GPU failed (out of device memory?)"};
  }
  *out = std::move(s);
  return {};
}

Status place_on_device(const verify::Case& c, Backend requested, bool with_backward, Placement* out) {
  InputSet s;
  if (Status st = mirror_case(c, requested, with_backward, &s); !st.ok()) return st;
  Placement p;
  p.on_device = true;
  if (Status st = select_forward_backend(s.fwd, &p.chosen); !st.ok()) return st;
  p.sets.push_back(std::move(s));
  *out = std::move(p);
  return {};
}

// One input set, on the host or the device, as `requested` and the selectors decide.
Status place_once(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out,
                  std::string* note) {
  std::string why;
  if (is_cuda(requested)) {
    if (!verify::cuda_available(&why))
      return {StatusCode::kUnsupported, std::string("backend ") + backend_name(requested) + ": " + why};
    return place_on_device(c, requested, with_backward, out);
  }
  if (requested == Backend::kAuto) {
    if (!verify::cuda_available(&why)) {
      *note = why;
      return place_on_host(c, requested, threads, with_backward, out);
    }
    // A device is present: the selectors decide whether CUDA kernels take this call (and its backward,
    // when asked for: a forward on the device is no use to a backward that only the CPU runs).
    Placement dev;
    Status s = place_on_device(c, requested, with_backward, &dev);
    Backend bwd_chosen = Backend::kAuto;
    if (s.ok() && with_backward) s = select_backward_backend(dev.sets[0].bwd, &bwd_chosen);
    if (s.ok()) {
      *out = std::move(dev);
      return s;
    }
    *note = "CUDA device passed over: " + s.message;
  }
  return place_on_host(c, requested, threads, with_backward, out);
}

// BENCHMARKS.md: inputs larger than L2, or rotated among several sets. Taken in turn, a set was last touched
// n - 1 sets of traffic ago, so 1 + ceil(L2 / set) sets evict each one before its next call. The L2 size is
// BENCHMARKS.md's 60 MB for the H200 or the GPU's own, whichever is larger.
int device_input_sets(int64_t set_bytes) {
  // Sets under L2 / 63 (about 1 MB) belong to launch-bound calls whose time L2 hardly changes; more copies
  // would only cost allocations.
  constexpr int64_t kMaxSets = 64;
  const int64_t l2 = std::max<int64_t>(gpu::l2_bytes(), int64_t{60} << 20);
  if (set_bytes >= l2) return 1;
  set_bytes = std::max<int64_t>(set_bytes, 1);
  return static_cast<int>(std::min<int64_t>(kMaxSets, 1 + (l2 + set_bytes - 1) / set_bytes));
}

// Bytes of one device copy of `c`: whole allocations, guard bands included, as DeviceMirror copies them.
int64_t mirrored_bytes(const verify::Case& c) {
  int64_t bytes = 0;
  for (const verify::HostTensor* t : {&c.q, &c.k, &c.v, &c.out, &c.lse, &c.dout, &c.dq, &c.dk, &c.dv})
    if (t->storage()) bytes += static_cast<int64_t>(t->storage()->size());
  return bytes;
}

}  // namespace

Status place(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out,
             std::string* note) {
  note->clear();
  Placement p;
  if (Status s = place_once(c, requested, threads, with_backward, &p, note); !s.ok()) return s;
  if (p.on_device)
    for (int i = device_input_sets(mirrored_bytes(c)); i > 1; --i) {
      InputSet s;
      if (Status st = mirror_case(c, requested, with_backward, &s); !st.ok()) return st;
      p.sets.push_back(std::move(s));
    }
  *out = std::move(p);
  return {};
}

Status fetch_outputs(const Placement& p) {
  std::string error;
  if (p.on_device && !p.sets[0].mirror->copy_back(&error)) return {StatusCode::kDeviceError, error};
  return {};
}

int32_t resolved_threads(int32_t requested) { return requested > 0 ? requested : omp_get_max_threads(); }

// ---- peak memory ------------------------------------------------------------------------------------------

namespace {

// A "VmRSS:   1234 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') return std::stoll(line.substr(n + 1)) * 1024;
  return -1;
}

// Peak RSS of one call, from the kernel's accounting: writing "5" to clear_refs resets VmHWM (the peak) to
// the current RSS, so VmHWM after the call minus VmRSS before it is what the call added at its peak, counted
// in pages really touched (a reserved but untouched buffer costs nothing, as it costs the machine nothing).
class PeakRss {
 public:
  // False (and why) when the peak cannot be reset, e.g. /proc is not mounted or not Linux.
  bool begin(std::string* why) {
    before_ = proc_status_bytes("VmRSS");
    errno = 0;
    std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
    bool reset = f != nullptr;
    if (f) reset = (std::fputs("5", f) >= 0) & (std::fclose(f) == 0);  // the write happens at fclose
    if (!reset || before_ < 0) {
      *why = std::string("peak RSS cannot be reset (/proc/self/clear_refs: ") + std::strerror(errno) + ")";
      return false;
    }
    return true;
  }
  int64_t end() const { return std::max<int64_t>(proc_status_bytes("VmHWM") - before_, 0); }

 private:
  int64_t before_ = -1;
};

}  // namespace

void freeze_malloc_thresholds() { mallopt(M_MMAP_THRESHOLD, 16 * 1024); }

// ---- timing -----------------------------------------------------------------------------------------------

double Timing::median_ms() const {
  if (ms.empty()) return first_ms;
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}
double Timing::min_ms() const { return ms.empty() ? first_ms : *std::min_element(ms.begin(), ms.end()); }
double Timing::max_ms() const { return ms.empty() ? first_ms : *std::max_element(ms.begin(), ms.end()); }

Status time_calls(const Placement& p, const std::function<Status(const InputSet&)>& call, int repeats, Timing* out,
                  bool sustained) {
  Timing t;
  if (p.on_device) {
    t.memory_note = "not measured on a CUDA device (the library's device allocations are its own)";
    std::vector<double> warm_up;
    if (Status s = gpu::time_calls([&](int) { return call(p.sets[0]); }, 1, &warm_up); !s.ok()) return s;
    t.first_ms = warm_up[0];
    const auto timed = [&](int i) { return call(p.sets[(i + 1) % p.sets.size()]); };
    if (sustained) {  // a call's time from three, then ~50 ms of untimed calls; the timed ones cover >= 200 ms
      constexpr double kWarmUpMs = 50, kTimedMs = 200;
      if (Status s = gpu::time_calls(timed, 3, &warm_up); !s.ok()) return s;
      const double call_ms = std::max(*std::min_element(warm_up.begin(), warm_up.end()), 1e-3);
      const auto calls_for = [&](double ms) {
        return static_cast<int>(std::min<double>(kMaxSustainedCalls, std::ceil(ms / call_ms)));
      };
      if (Status s = gpu::time_calls(timed, calls_for(kWarmUpMs), &warm_up); !s.ok()) return s;
      repeats = std::max(repeats, calls_for(kTimedMs));
    }
    if (Status s = gpu::time_calls(timed, repeats, &t.ms); !s.ok()) return s;
    *out = std::move(t);
    return {};
  }
  bool measure_memory = true;
  for (int i = 0; i <= repeats; ++i) {
    PeakRss peak;
    measure_memory = measure_memory && peak.begin(&t.memory_note);
    const auto start = std::chrono::steady_clock::now();
    if (Status s = call(p.sets[0]); !s.ok()) return s;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (measure_memory) {
      const int64_t extra = peak.end();
      if (i == 0) t.first_extra_bytes = extra;
      else t.extra_bytes = std::max(t.extra_bytes, extra);
    }
    if (i == 0) t.first_ms = ms;
    else t.ms.push_back(ms);
  }
  *out = std::move(t);
  return {};
}

// ---- FLOPs ------------------------------------------------------------------------------------------------

double headline_flops(const verify::Problem& p) {
  const double full = 4.0 * p.batch * p.heads_q * static_cast<double>(p.seqlen_q) * p.seqlen_k * p.head_dim;
  return p.options.causal ? full / 2 : full;
}

double exact_flops(const verify::Problem& p) {
  // Row i sees keys [lo, hi]; causal and windows are bottom-right aligned (SPEC.md, Masks), and causal
  // together with a window takes min(right, 0), as AttentionOptions documents.
  const int64_t offset = p.seqlen_k - p.seqlen_q;
  int64_t right = p.options.window_right;
  if (p.options.causal) right = right < 0 ? 0 : std::min<int64_t>(right, 0);
  const int64_t left = p.options.window_left;
  double visible = 0;
  for (int64_t i = 0; i < p.seqlen_q; ++i) {
    const int64_t lo = left < 0 ? 0 : std::max<int64_t>(0, i + offset - left);
    const int64_t hi = right < 0 ? p.seqlen_k - 1 : std::min<int64_t>(p.seqlen_k - 1, i + offset + right);
    if (hi >= lo) visible += static_cast<double>(hi - lo + 1);
  }
  return 2.0 * p.batch * p.heads_q * visible * static_cast<double>(p.head_dim + p.head_dim_v);
}

std::string format_flops(double flops) {
  char buf[32];
  if (flops >= 1e12) std::snprintf(buf, sizeof buf, "%.2f TFLOP", flops / 1e12);
  else std::snprintf(buf, sizeof buf, "%.2f GFLOP", flops / 1e9);
  return buf;
}

std::string format_ms(double ms) {
  if (!std::isfinite(ms)) return "-";
  const int digits = ms < 0.01 ? 5 : ms < 0.1 ? 4 : ms < 1 ? 3 : ms < 10 ? 2 : ms < 100 ? 1 : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, ms);
  return buf;
}

std::string format_mib(double bytes) {
  const double mib = bytes / (1024.0 * 1024.0);
  char buf[32];
  std::snprintf(buf, sizeof buf, mib < 1e9 ? "%.1f MiB" : "%.3g MiB", mib);
  return buf;
}

}  // namespace flashtile::tool
