// `flashtile check`: a randomised correctness sweep. Each case draws a small problem (shapes, GQA ratio, mask,
// softcap, scale, layout, dtype, peaked inputs) and runs it forward (and backward where the backend has one)
// through verify::check: oracle, same-precision baseline, the TESTING.md rule, poisoned outputs, guard bands.
// The CUDA backend gets device copies of the same buffers (verify::DeviceMirror) and problems in its range.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include "cli_options.hpp"
#include "commands.hpp"
#include "gpu.hpp"
#include "verify/device_mirror.hpp"

namespace flashtile::tool {

namespace {

template <typename T>
T pick(std::mt19937_64& rng, const std::vector<T>& from) {
  return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
}
bool chance(std::mt19937_64& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

// Lengths that sit on or next to tile edges (64, 128) and primes that divide nothing; the rest uniform.
int64_t draw_seqlen(std::mt19937_64& rng, int64_t max_seqlen) {
  if (chance(rng, 0.02)) return 0;  // empty problems are valid (SPEC.md, Errors)
  std::vector<int64_t> edges;
  for (int64_t s : {1, 2, 3, 17, 31, 61, 63, 64, 65, 97, 113, 127, 128, 129, 251, 255, 256, 257})
    if (s <= max_seqlen) edges.push_back(s);
  return chance(rng, 0.5) ? pick(rng, edges) : uniform(rng, 1, max_seqlen);
}

// Work of one check, in units of (row, key, head-dim column): the oracle's and the baseline's forward and
// backward are all proportional to it.
double work(const verify::Problem& p) {
  return static_cast<double>(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_k * (p.head_dim + p.head_dim_v);
}

// A problem for a backend on `device`. The CUDA kernels take a narrower range: fp16 and bf16, head dims
// that are multiples of 8 up to 256, Dv = D.
verify::Problem draw_problem(std::mt19937_64& rng, int64_t max_seqlen, Device device) {
  verify::Problem p;
  p.batch = pick<int64_t>(rng, {1, 1, 2, 3});
  p.seqlen_q = draw_seqlen(rng, max_seqlen);
  p.seqlen_k = chance(rng, 0.6) ? p.seqlen_q : draw_seqlen(rng, max_seqlen);  // Sq > Sk and Sq < Sk too
  p.heads_kv = pick<int64_t>(rng, {1, 2, 3});
  p.heads_q = p.heads_kv * pick<int64_t>(rng, {1, 1, 2, 3, 4, 8});  // MHA, GQA, and MQA when heads_kv = 1
  if (device == Device::kCUDA) {
    // Half the draws on the head dims the kernels are instantiated for by default, half padded up to one.
    p.head_dim = chance(rng, 0.5) ? pick<int64_t>(rng, {64, 96, 128, 192, 256}) : 8 * uniform(rng, 1, 32);
    p.head_dim_v = p.head_dim;
    p.dtype = pick<DType>(rng, {DType::kFloat16, DType::kBFloat16});
  } else {
    const std::vector<int64_t> dims = {8, 16, 32, 64, 96, 128, 256};
    p.head_dim = pick(rng, dims);
    p.head_dim_v = chance(rng, 0.75) ? p.head_dim : pick(rng, dims);
    p.dtype = pick<DType>(rng, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  }

  // Masks. With Sq > Sk a causal mask leaves the first rows without a visible key; narrow windows off the
  // diagonal do the same, and a window wider than both sequences must equal no mask.
  AttentionOptions& o = p.options;
  const int64_t span = std::max<int64_t>(p.seqlen_k, 1);
  switch (uniform(rng, 0, 9)) {
    case 0: case 1: case 2: break;                                                        // none
    case 3: case 4: case 5: o.causal = true; break;
    case 6: o.window_left = uniform(rng, 0, span); break;                                 // left only
    case 7: o.window_right = uniform(rng, 0, span); break;                                // right only
    case 8: o.window_left = uniform(rng, 0, span), o.window_right = uniform(rng, 0, span / 4); break;
    default:
      if (chance(rng, 0.5)) o.window_left = o.window_right = p.seqlen_q + p.seqlen_k + 7;  // wider than both
      else o.causal = true, o.window_left = uniform(rng, 0, span);                        // causal + window
  }
  if (chance(rng, 0.2)) o.softcap = pick<float>(rng, {5.0f, 30.0f, 50.0f});
  if (chance(rng, 0.1)) o.softmax_scale = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
  // All three keep rows 16-byte aligned for any head dim that is a multiple of 8, as the CUDA kernels need.
  p.layout = pick<verify::Layout>(rng, {verify::Layout::kContiguous, verify::Layout::kContiguous,
                                         verify::Layout::kHeadsFirst, verify::Layout::kPadded});
  p.inputs = chance(rng, 0.3) ? verify::Inputs::kPeaked : verify::Inputs::kNormal;

  // Keep a case to a fraction of a second: the baseline is deliberately naive scalar code. Batch and heads
  // go first, as they add the least coverage; seqlens and head dims, where the tile edges are, go last.
  constexpr double kBudget = 4e6;
  while (work(p) > kBudget && p.batch > 1) --p.batch;
  while (work(p) > kBudget && p.heads_q > p.heads_kv) p.heads_q -= p.heads_kv;
  while (work(p) > kBudget && p.heads_kv > 1) p.heads_q = --p.heads_kv;
  while (work(p) > kBudget) (p.seqlen_q > p.seqlen_k ? p.seqlen_q : p.seqlen_k) /= 2;
  return p;
}

// What failed: the call's error, and the verdicts that broke the rule (the passing ones are noise here).
std::string failures(const verify::CheckResult& r) {
  std::string s = r.error;
  for (const verify::Verdict& v : r.verdicts)
    if (!v.pass) s += (s.empty() ? "" : "; ") + v.summary();
  return s;
}

// cpu-flash1 is forward-only by design. A CUDA backend's case runs its forward and then the backward kernels the
// library picks for the device (sm90 on a Hopper GPU unless FLASHTILE_CUDA_BACKWARD_KERNELS=sm80, else sm80).
bool has_backward(Backend b) { return b != Backend::kCpuFlash1; }

// The CUDA selector's answer for case `seed` of p. It answers only for tensors really in device memory, so it is
// asked with device copies of the case's buffers.
Status cuda_selects(const verify::Problem& p, uint64_t seed, Backend backend) {
  const verify::Case c = verify::Case::make(p, seed, false);
  verify::DeviceMirror mirror;
  ForwardParams f = c.forward_params(backend);
  f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
  f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
  Backend chosen = Backend::kAuto;
  return select_forward_backend(f, &chosen);
}

}  // namespace

int check_command(const std::vector<std::string>& args) {
  int64_t cases = 50, max_seqlen = 300;
  int32_t threads = 0;
  bool seed_given = false, verbose = false, backends_given = false;
  uint64_t seed = 0;
  std::string device = "auto";
  std::vector<Backend> backends = {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference};

  OptionSet o("check",
              "Randomised correctness sweep: each case draws a small problem (seqlens up to --max-seqlen, head dims\n"
              "8..256, GQA/MQA ratios, causal and window masks, softcap, scale, strided layouts, fp32/fp16/bf16,\n"
              "peaked inputs) and checks forward and backward (cpu-flash1: forward only) against the float64 oracle\n"
              "with TESTING.md's rule, including that every output is written and no guard band is touched.\n"
              "With a GPU, cuda-sm80 joins (and cuda-sm90 where the build and the GPU have it), forward and\n"
              "backward, on device copies of the same buffers, with problems in their range (fp16/bf16, head dims\n"
              "multiples of 8 up to 256, Dv = D); problems a selector refuses are counted as skipped, with the\n"
              "reason. The CUDA backward is the kernels the library picks for the GPU\n"
              "(FLASHTILE_CUDA_BACKWARD_KERNELS).\n"
              "Case i of seed S is case 0 of seed S+i, so one failing case replays alone. Exit code 1 on failure.");
  o.add({"--cases", "-n", "N", "number of random problems [50]",
         [&](const std::string& v) { cases = parse_int("--cases", v, 1, 100000000); }});
  o.add({"--seed", "", "N", "seed of the first case [from the clock; printed]", [&](const std::string& v) {
           seed = parse_seed("--seed", v);
           seed_given = true;
         }});
  o.add({"--device", "", "WHERE",
         "cpu | cuda | auto; cuda adds cuda-sm80 (and cuda-sm90) on GPU 0, auto = cuda when usable [auto]",
         [&](const std::string& v) {
           if (v != "cpu" && v != "cuda" && v != "auto")
             throw UsageError("--device: '" + v + "' is not cpu, cuda or auto");
           device = v;
         }});
  o.add({"--backend", "", "LIST",
         "comma-separated backends [cpu-flash2,cpu-flash1,cpu-reference; cuda-sm80, cuda-sm90 too on --device cuda]",
         [&](const std::string& v) {
           backends.clear();
           for (const std::string& name : split(v, ',')) backends.push_back(parse_backend("--backend", name));
           if (backends.empty()) throw UsageError("--backend: no backend given");
           backends_given = true;
         }});
  o.add({"--max-seqlen", "", "N", "longest seqlen drawn [300]",
         [&](const std::string& v) { max_seqlen = parse_int("--max-seqlen", v, 1, 1 << 20); }});
  o.add({"--threads", "-t", "N", "CPU threads; 0 = all cores [0]",
         [&](const std::string& v) { threads = static_cast<int32_t>(parse_int("--threads", v, 0, 4096)); }});
  o.flag("--verbose", "-v", "one line per check, passed ones too", [&] { verbose = true; });
  o.add_example("flashtile check", "50 cases on every CPU backend (and the CUDA ones with a GPU), seed from the clock");
  o.add_example("flashtile check --cases 500 --seed 7 --backend cpu-flash2", "a longer sweep of the FA2 schedule");
  o.add_example("flashtile check --cases 200 --backend cuda-sm90", "the Hopper kernels alone");
  o.add_example("flashtile check --seed 1041 --cases 1 -v", "replay the case a failure line named (seed 1041)");
  if (!o.parse(args)) {
    std::cout << o.help();
    return kExitOk;
  }

  const auto first_cuda = std::find_if(backends.begin(), backends.end(), is_cuda);
  const bool listed_cuda = first_cuda != backends.end();
  if (device == "cpu" && listed_cuda) throw UsageError("--backend: the CUDA backends run with --device cuda or auto");
  if (device == "cuda" && backends_given && !listed_cuda)
    throw UsageError("--device cuda: --backend lists no CUDA backend (cuda-sm80, cuda-sm90)");
  std::string why;
  const bool gpu_usable = verify::cuda_available(&why);
  if ((device == "cuda" || listed_cuda) && !gpu_usable) {
    const std::string asked = listed_cuda ? std::string("--backend ") + backend_name(*first_cuda) : "--device cuda";
    std::fprintf(stderr, "flashtile check: %s needs a usable CUDA GPU: %s\n", asked.c_str(), why.c_str());
    return kExitFailed;
  }
  if (!backends_given && device != "cpu" && gpu_usable) {
    backends.push_back(Backend::kCudaSm80);
    // cuda-sm90 where this build and GPU have it: asked of its selector with a small bf16 problem at D = 128.
    verify::Problem probe;
    probe.batch = 1, probe.seqlen_q = probe.seqlen_k = 64, probe.heads_q = probe.heads_kv = 1;
    probe.head_dim = probe.head_dim_v = 128;
    probe.dtype = DType::kBFloat16;
    if (cuda_selects(probe, 0, Backend::kCudaSm90).ok()) backends.push_back(Backend::kCudaSm90);
  }

  if (!seed_given)  // small enough to type back in
    seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007;
  // verify::check leaves num_threads at 0, which the CPU backends resolve through OpenMP's default.
  if (threads > 0) omp_set_num_threads(threads);
  std::printf("flashtile %s check: seed %llu, %lld cases, backends", version(), static_cast<unsigned long long>(seed),
              static_cast<long long>(cases));
  for (Backend b : backends) std::printf(" %s (%s)", backend_name(b), has_backward(b) ? "fwd+bwd" : "fwd");
  std::printf(", %d threads\n", threads > 0 ? threads : omp_get_max_threads());
  if (std::any_of(backends.begin(), backends.end(), is_cuda))
    std::printf("CUDA backends on GPU 0 (%s): fp16/bf16, head dims multiples of 8 up to 256, Dv = D; the "
                "backward by the kernels the library picks for this GPU\n", gpu::device_name().c_str());
  std::fflush(stdout);

  const bool progress = !verbose && isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  int64_t passed = 0, failed = 0, skipped = 0;
  for (int64_t i = 0; i < cases; ++i) {
    const uint64_t case_seed = seed + static_cast<uint64_t>(i);
    // Each device draws its problem from the case's seed, so a case replays alone on either.
    const auto draw = [&](Device d) {
      std::mt19937_64 rng(case_seed);
      return draw_problem(rng, max_seqlen, d);
    };
    const verify::Problem host_problem = draw(Device::kCPU), cuda_problem = draw(Device::kCUDA);
    if (progress) std::fprintf(stderr, "\r[%lld/%lld]", static_cast<long long>(i + 1), static_cast<long long>(cases));
    for (Backend b : backends) {
      const Device d = is_cuda(b) ? Device::kCUDA : Device::kCPU;
      const verify::Problem& p = d == Device::kCUDA ? cuda_problem : host_problem;
      const auto report = [&](const char* verdict, const std::string& detail) {
        if (progress) std::fprintf(stderr, "\r\x1b[K");
        std::printf("%s seed %llu %s %s: %s%s%s\n", verdict, static_cast<unsigned long long>(case_seed),
                    backend_name(b), has_backward(b) ? "fwd+bwd" : "fwd", p.describe().c_str(),
                    detail.empty() ? "" : ": ", detail.c_str());
        std::fflush(stdout);
      };
      if (d == Device::kCUDA) {
        // kUnsupported: a valid call this backend cannot run, a gap in its coverage rather than a wrong answer.
        if (const Status s = cuda_selects(p, case_seed, b); s.code == StatusCode::kUnsupported) {
          ++skipped;
          report("skip", s.message);
          continue;
        }
      }
      const verify::CheckResult r = verify::check(p, case_seed, b, has_backward(b), d);
      (r.pass() ? passed : failed) += 1;
      if (r.pass() && !verbose) continue;
      report(r.pass() ? "ok  " : "FAIL", r.pass() ? "" : failures(r));
    }
  }
  if (progress) std::fprintf(stderr, "\r\x1b[K");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%lld passed, %lld failed", static_cast<long long>(passed), static_cast<long long>(failed));
  if (skipped) std::printf(", %lld skipped", static_cast<long long>(skipped));
  std::printf(" (%lld cases x %zu backends, seed %llu, %.1f s)\n", static_cast<long long>(cases), backends.size(),
              static_cast<unsigned long long>(seed), seconds);
  if (failed)
    std::printf("replay a failure alone: flashtile check --seed <its seed> --cases 1 --backend <its backend> -v\n");
  return failed ? kExitFailed : kExitOk;
}

}  // namespace flashtile::tool
