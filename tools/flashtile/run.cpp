// `flashtile run`: one representative problem on the best backend present, timed, measured and verified.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli_options.hpp"
#include "commands.hpp"
#include "measure.hpp"

namespace flashtile::tool {

namespace {

// Bytes of the tensors the tool allocates itself (inputs, outputs, and the backward's), which the
// peak-memory figure does not include. In double: each option may be up to 2^40, so the count overflows int64.
double tensor_bytes(const verify::Problem& p, bool with_backward) {
  const double q = static_cast<double>(p.batch) * p.seqlen_q * p.heads_q;
  const double kv = static_cast<double>(p.batch) * p.seqlen_k * p.heads_kv;
  double elems = q * p.head_dim + kv * (p.head_dim + p.head_dim_v) + q * p.head_dim_v;  // q, k, v, out
  if (with_backward) elems *= 2;                                                        // dq, dk, dv, dout
  return elems * static_cast<double>(dtype_size(p.dtype)) + q * 4;                     // + lse, fp32
}

// The machine's physical memory, or 2^63 bytes where it cannot be read.
double memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0x1p63;
}

void print_memory(const Timing& t, const char* first_call_note) {
  if (t.first_extra_bytes < 0) {
    std::printf("  memory   %s\n", t.memory_note.c_str());
    return;
  }
  std::printf("  memory   peak extra %s per call; first call %s%s\n", format_mib(t.extra_bytes).c_str(),
              format_mib(t.first_extra_bytes).c_str(), first_call_note);
}

// "812.3 ms median of 5 (min .., max ..; warm-up ..)" then TFLOP/s by the headline and the exact count.
void print_timing(const char* what, const Timing& t, double headline, double exact, const std::string& model) {
  const double ms = t.median_ms();
  std::printf("  %-8s %s ms, median of %zu (min %s, max %s; warm-up %s)\n", what, format_ms(ms).c_str(), t.ms.size(),
              format_ms(t.min_ms()).c_str(), format_ms(t.max_ms()).c_str(), format_ms(t.first_ms).c_str());
  const double diff = 100.0 * (exact - headline) / headline;
  std::printf("           %.3f TFLOP/s by the headline count %s = %s", headline / ms / 1e9, model.c_str(),
              format_flops(headline).c_str());
  // The headline ignores windows and Dv != D, and counts causal as exactly half: say how far that is off.
  if (std::fabs(diff) < 1.0)
    std::printf(" (exact count %+.2f%%)\n", diff);
  else
    std::printf("\n           %.3f TFLOP/s by the exact count = %s (%+.1f%% vs the headline)\n", exact / ms / 1e9,
                format_flops(exact).c_str(), diff);
}

void print_verdict(const verify::Verdict& v) {
  if (v.name == "lse")
    std::printf("           lse  max err %.3g, bound %.0e x max(1, |lse|)", v.max_err, v.bound);
  else
    std::printf("           %-4s max err %.3g, bound %.3g (2 x same-precision baseline + 2 ulp); mean %.3g, "
                "baseline mean %.3g",
                v.name.c_str(), v.max_err, v.bound, v.mean_err, v.mean_base);
  if (v.nonfinite) std::printf("; %lld non-finite", static_cast<long long>(v.nonfinite));
  std::printf("%s\n", v.pass ? "" : "  <- FAIL");
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  ShapeOptions shape;
  int64_t repeats = -1, verify_rows = 64;  // repeats -1: kHostRepeats or kDeviceRepeats, where it runs
  uint64_t seed = 0;
  bool with_backward = false;

  OptionSet o("run",
              "Runs one representative attention problem (default: B=1, H=16, S=4096, D=128, causal, bf16) on the\n"
              "best backend present, times it (1 warm-up, then the median of --repeats calls), measures the peak\n"
              "extra memory of a call, and verifies sampled output rows against the float64 oracle.\n"
              "Exit code 1 when verification fails or the library refuses the call, 2 for a bad command line.");
  shape.add_to(o);
  o.add({"--repeats", "-r", "N", "timed calls after one warm-up; the median is reported [5; 20 on a GPU]",
         [&](const std::string& v) { repeats = parse_int("--repeats", v, 1, 1000000); }});
  o.flag("--backward", "", "also time the backward (not verified at this size: `flashtile check` does that)",
         [&] { with_backward = true; });
  o.add({"--verify-rows", "", "N", "query rows checked against the float64 oracle, first and last included [64]",
         [&](const std::string& v) { verify_rows = parse_int("--verify-rows", v, 1, 1000000); }});
  o.add({"--seed", "", "N", "seed of the standard-normal inputs [0]",
         [&](const std::string& v) { seed = parse_seed("--seed", v); }});
  o.add_note("TFLOP/s use SPEC.md's headline count 4*B*H*Sq*Sk*D, halved for causal, so they compare with\n"
             "published tables; the exact count of visible (row, key) pairs is shown beside it.\n"
             "Peak extra memory is the rise of the process's peak RSS over its RSS before the call (Linux /proc),\n"
             "not counting the tensors the tool allocates itself.");
  o.add_example("flashtile run", "the default problem (takes a while on a few cores)");
  o.add_example("flashtile run -s 1024 --dtype fp32 --no-causal", "a smaller full-attention problem in fp32");
  o.add_example("flashtile run -s 2k --heads 32 --heads-kv 8 --backward", "GQA, forward and backward timed");
  o.add_example("flashtile run --backend cpu-flash1 -s 1k", "the FlashAttention-1 schedule, for comparison");
  if (!o.parse(args)) {
    std::cout << o.help();
    return kExitOk;
  }

  freeze_malloc_thresholds();
  const verify::Problem problem = shape.problem();
  std::printf("flashtile %s run\n", version());
  std::printf("  problem  %s%s\n", problem.describe().c_str(),
              problem.options.causal ? " (bottom-right aligned)" : "");
  const double bytes = tensor_bytes(problem, with_backward);
  std::printf("  inputs   standard normal, seed %llu; %s of tensors\n", static_cast<unsigned long long>(seed),
              format_mib(bytes).c_str());
  std::fflush(stdout);
  // Refused before they are allocated: the tool fills every input, which past the machine's memory would swap
  // or be killed (and sizes over 2^63 bytes would overflow the allocation's own arithmetic).
  if (const double memory = memory_bytes(); bytes > memory) {
    std::fprintf(stderr, "flashtile run: the tensors need %s, more than this machine's %s of memory; "
                         "try a smaller shape\n", format_mib(bytes).c_str(), format_mib(memory).c_str());
    return kExitFailed;
  }
  const verify::Case c = verify::Case::make(problem, seed, with_backward);

  Placement pl;
  std::string note;
  if (Status s = place(c, shape.backend, shape.threads, with_backward, &pl, &note); !s.ok()) {
    std::fprintf(stderr, "flashtile run: %s\n", s.message.c_str());
    return kExitFailed;
  }
  std::printf("  backend  %s (select_forward_backend's choice for --backend %s)", backend_name(pl.chosen),
              backend_name(shape.backend));
  if (!pl.on_device) std::printf(", threads %d", resolved_threads(shape.threads));
  if (pl.sets.size() > 1) std::printf(", inputs rotated among %zu copies so that none is in L2", pl.sets.size());
  std::printf("%s%s\n", note.empty() ? "" : "; ", note.c_str());
  Backend backward_chosen = Backend::kAuto;
  if (with_backward) {
    // Asked before anything runs, so a backend without a backward (cpu-flash1) fails fast.
    if (Status s = select_backward_backend(pl.sets[0].bwd, &backward_chosen); !s.ok()) {
      std::fprintf(stderr, "flashtile run: backward: %s\n", s.message.c_str());
      return kExitFailed;
    }
    std::printf("  backward %s (select_backward_backend's choice)\n", backend_name(backward_chosen));
  }
  std::fflush(stdout);

  if (repeats < 0) repeats = pl.on_device ? kDeviceRepeats : kHostRepeats;
  Timing fwd;
  const auto forward_call = [](const InputSet& set) { return forward(set.fwd); };
  if (Status s = time_calls(pl, forward_call, static_cast<int>(repeats), &fwd); !s.ok()) {
    std::fprintf(stderr, "flashtile run: forward: %s\n", s.message.c_str());
    return kExitFailed;
  }
  const double headline = headline_flops(problem), exact = exact_flops(problem);
  const std::string model = problem.options.causal ? "4*B*H*Sq*Sk*D/2" : "4*B*H*Sq*Sk*D";
  print_timing("forward", fwd, headline, exact, model);
  print_memory(fwd, " (includes starting the thread pool and BLAS buffers)");
  std::fflush(stdout);

  if (Status s = fetch_outputs(pl); !s.ok()) {
    std::fprintf(stderr, "flashtile run: %s\n", s.message.c_str());
    return kExitFailed;
  }
  // sample_rows gives the first and last rows and `count` more.
  const std::vector<verify::RowSample> rows =
      verify::sample_rows(problem, static_cast<int>(std::max<int64_t>(verify_rows - 2, 0)), seed);
  const verify::CheckResult check = verify::check_rows(c, rows);
  std::printf("  verify   %s: %zu rows (first and last included) against the float64 oracle\n",
              check.pass() ? "PASS" : "FAIL", rows.size());
  for (const verify::Verdict& v : check.verdicts) print_verdict(v);
  std::fflush(stdout);

  if (with_backward) {
    Timing bwd;
    const auto backward_call = [](const InputSet& set) { return backward(set.bwd); };
    if (Status s = time_calls(pl, backward_call, static_cast<int>(repeats), &bwd); !s.ok()) {
      std::fprintf(stderr, "flashtile run: backward: %s\n", s.message.c_str());
      return kExitFailed;
    }
    // SPEC.md: backward FLOPs = 2.5 x forward.
    print_timing("backward", bwd, 2.5 * headline, 2.5 * exact, "2.5 x " + model);
    print_memory(bwd, "");
    std::printf("           not verified: the float64 oracle over whole gradients is too slow at this size; "
                "`flashtile check` verifies the backward on small shapes\n");
  }
  return check.pass() ? kExitOk : kExitFailed;
}

}  // namespace flashtile::tool
