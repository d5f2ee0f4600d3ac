#include "measure.hpp"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace flashtile::tool {

// ---- placement --------------------------------------------------------------------------------------------

namespace {

bool is_cuda(Backend b) { return b == Backend::kCudaSm80 || b == Backend::kCudaSm90; }

Status place_on_host(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out) {
  Placement p;
  p.fwd = c.forward_params(requested);
  p.fwd.num_threads = threads;
  if (with_backward) {
    p.bwd = c.backward_params(requested);
    p.bwd.num_threads = threads;
  }
  if (Status s = select_forward_backend(p.fwd, &p.chosen); !s.ok()) return s;
  *out = std::move(p);
  return {};
}

Status place_on_device(const verify::Case& c, Backend requested, bool with_backward, Placement* out) {
  Placement p;
  p.on_device = true;
  p.mirror = std::make_shared<device::Mirror>();
  device::Mirror& m = *p.mirror;
  const ForwardParams host_fwd = c.forward_params(requested);
  p.fwd = host_fwd;
  for (auto [from, to] : {std::pair{&host_fwd.q, &p.fwd.q}, {&host_fwd.k, &p.fwd.k}, {&host_fwd.v, &p.fwd.v},
                          {&host_fwd.out, &p.fwd.out}, {&host_fwd.lse, &p.fwd.lse}})
    if (Status s = m.upload(*from, to); !s.ok()) return s;
  if (with_backward) {
    const BackwardParams host_bwd = c.backward_params(requested);
    p.bwd = host_bwd;
    // q, k, v, out and lse are the forward's device buffers: the backward reads what the forward wrote.
    p.bwd.q = p.fwd.q, p.bwd.k = p.fwd.k, p.bwd.v = p.fwd.v, p.bwd.out = p.fwd.out, p.bwd.lse = p.fwd.lse;
    for (auto [from, to] : {std::pair{&host_bwd.dout, &p.bwd.dout}, {&host_bwd.dq, &p.bwd.dq},
                            {&host_bwd.dk, &p.bwd.dk}, {&host_bwd.dv, &p.bwd.dv}})
      if (Status s = m.upload(*from, to); !s.ok()) return s;
  }
  if (Status s = select_forward_backend(p.fwd, &p.chosen); !s.ok()) return s;
  *out = std::move(p);
  return {};
}

}  // namespace

Status place(const verify::Case& c, Backend requested, int32_t threads, bool with_backward, Placement* out,
             std::string* note) {
  note->clear();
  if (is_cuda(requested)) {
    std::string why;
    if (!device::available(&why))
      return {StatusCode::kUnsupported, std::string("backend ") + backend_name(requested) + ": " + why};
    return place_on_device(c, requested, with_backward, out);
  }
  if (requested == Backend::kAuto) {
    std::string why;
    if (!device::available(&why)) {
      *note = why;
      return place_on_host(c, requested, threads, with_backward, out);
    }
    // A device is present: the selectors decide whether CUDA kernels take this call (and its backward,
    // when asked for: a forward on the device is no use to a backward that only the CPU runs).
    Placement dev;
    Status s = place_on_device(c, requested, with_backward, &dev);
    Backend bwd_chosen = Backend::kAuto;
    if (s.ok() && with_backward) s = select_backward_backend(dev.bwd, &bwd_chosen);
    if (s.ok()) {
      *out = std::move(dev);
      return s;
    }
    *note = "CUDA device passed over: " + s.message;
  }
  return place_on_host(c, requested, threads, with_backward, out);
}

Status fetch_outputs(const Placement& p, const verify::Case& c, bool with_backward) {
  if (!p.on_device) return {};
  std::vector<std::pair<const Tensor*, Tensor>> copies = {{&p.fwd.out, c.out.view()}, {&p.fwd.lse, c.lse.view()}};
  if (with_backward)
    copies.insert(copies.end(), {{&p.bwd.dq, c.dq.view()}, {&p.bwd.dk, c.dk.view()}, {&p.bwd.dv, c.dv.view()}});
  for (const auto& [dev, host] : copies)
    if (Status s = p.mirror->download(*dev, host); !s.ok()) return s;
  return {};
}

int32_t resolved_threads(int32_t requested) { return requested > 0 ? requested : omp_get_max_threads(); }

// ---- verification rows ------------------------------------------------------------------------------------

// `n` query rows spread over the problem: positions evenly spaced from the first row to the last, heads and
// batch entries cycled, so a bug confined to one region, head or batch entry is likely to be hit. The very
// first row (under a causal mask it sees a single key) and the very last (it sees them all) always are.
std::vector<verify::RowSample> spread_rows(const verify::Problem& p, int64_t n) {
  n = std::min<int64_t>(n, p.batch * p.heads_q * p.seqlen_q);
  std::vector<verify::RowSample> rows;
  for (int64_t i = 0; i < n; ++i)
    rows.push_back({(i / p.heads_q) % p.batch, i % p.heads_q, n == 1 ? 0 : i * (p.seqlen_q - 1) / (n - 1)});
  if (n > 1) rows.back() = {p.batch - 1, p.heads_q - 1, p.seqlen_q - 1};
  return rows;
}

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

Status time_calls(const std::function<Status()>& call, bool on_device, int repeats, Timing* out) {
  Timing t;
  bool measure_memory = !on_device;
  if (on_device) t.memory_note = "not measured on a CUDA device (the library's device allocations are its own)";
  for (int i = 0; i <= repeats; ++i) {
    double ms = 0;
    if (on_device) {
      if (Status s = device::time_ms(call, &ms); !s.ok()) return s;
    } else {
      PeakRss peak;
      measure_memory = measure_memory && peak.begin(&t.memory_note);
      const auto start = std::chrono::steady_clock::now();
      if (Status s = call(); !s.ok()) return s;
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (measure_memory) {
        const int64_t extra = peak.end();
        if (i == 0) t.first_extra_bytes = extra;
        else t.extra_bytes = std::max(t.extra_bytes, extra);
      }
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

std::string format_mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace flashtile::tool
