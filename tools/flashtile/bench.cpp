// `flashtile bench`: sweeps a BENCHMARKS.md grid, or shapes given on the command line, over one or more
// backends; writes one JSON object per case with bench/peers.py's field names, so flashtile's rows line up
// with the peers' (PyTorch CPU SDPA is peers.py's grid C, impl "torch-cpu"), and prints a markdown table.
// --ablation instead times the seeds' FA1-vs-FA2 comparison on the GPU (gpu::FwdVariant).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "cli_options.hpp"
#include "commands.hpp"
#include "gpu.hpp"
#include "measure.hpp"

namespace flashtile::tool {

namespace {

struct Shape {
  int64_t batch, seqlen, heads, heads_kv, head_dim;
};

// A grid: its shapes, and the dtypes, masks and backends it runs unless the command line narrows them.
struct Grid {
  std::string name;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<bool> causal;
  std::vector<Backend> backends;
  bool gpu_sized = false;  // sized for a GPU: on CPU cores it takes hours
};

// BENCHMARKS.md, "Grids". K (decode) measures bytes per second of a one-token query and is not run here.
Grid named_grid(const std::string& name) {
  Grid g;
  g.name = name;
  g.dtypes = {DType::kBFloat16};
  g.causal = {false, true};
  g.backends = {Backend::kCpuFlash2};
  if (name == "C") {  // CPU: all cores; the FA1 schedule rides along, it is what FA2's changes are measured by
    for (int64_t s : {1024, 4096}) g.shapes.push_back({1, s, 16, 16, 128});
    g.dtypes = {DType::kFloat32, DType::kBFloat16};
    g.backends = {Backend::kCpuFlash2, Backend::kCpuFlash1};
  } else if (name == "A") {  // training: 16k tokens per batch, hidden 2048
    for (int64_t d : {64, 128, 256})
      for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384}) g.shapes.push_back({16384 / s, s, 2048 / d, 2048 / d, d});
    g.gpu_sized = true;
  } else if (name == "L") {  // long context
    for (int64_t s : {32768, 65536}) g.shapes.push_back({1, s, 16, 16, 128});
    g.gpu_sized = true;
  } else if (name == "G") {  // GQA training, causal only
    for (int64_t s : {4096, 8192}) g.shapes.push_back({2, s, 32, 8, 128});
    g.causal = {true};
    g.gpu_sized = true;
  } else if (name == "K") {
    throw UsageError("--grid K (decode, a bandwidth metric) is not run by flashtile bench; use A, L, G or C");
  } else {
    throw UsageError("--grid: unknown grid '" + name + "' (A, L, G, C; see BENCHMARKS.md)");
  }
  return g;
}

// "B,S,H,D[,Hkv];..." -> shapes of a grid named "custom".
std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> shapes;
  for (const std::string& item : split(text, ';')) {
    const std::vector<std::string> f = split(item, ',');
    if (f.size() != 4 && f.size() != 5)
      throw UsageError("--shapes: '" + item + "' is not B,S,H,D or B,S,H,D,Hkv");
    constexpr int64_t kMax = int64_t{1} << 40;
    Shape s{parse_int("--shapes", f[0], 1, kMax), parse_int("--shapes", f[1], 1, kMax),
            parse_int("--shapes", f[2], 1, kMax), 0, parse_int("--shapes", f[3], 1, kMax)};
    s.heads_kv = f.size() == 5 ? parse_int("--shapes", f[4], 1, kMax) : s.heads;
    if (s.heads % s.heads_kv != 0)
      throw UsageError("--shapes: in '" + item + "', Hkv (" + std::to_string(s.heads_kv) + ") does not divide H (" +
                       std::to_string(s.heads) + ")");
    shapes.push_back(s);
  }
  if (shapes.empty()) throw UsageError("--shapes: no shapes given");
  return shapes;
}

// "B1 H32/8 D128 S4096": the kv heads only where they differ (GQA).
std::string shape_text(const Shape& s) {
  std::string t = "B" + std::to_string(s.batch) + " H" + std::to_string(s.heads);
  if (s.heads_kv != s.heads) t += "/" + std::to_string(s.heads_kv);
  return t + " D" + std::to_string(s.head_dim) + " S" + std::to_string(s.seqlen);
}

// peers.py's impl names: flashtile-cpu is the FA2 schedule, the default CPU backend.
const char* impl_name(Backend b) {
  switch (b) {
    case Backend::kCpuFlash2: return "flashtile-cpu";
    case Backend::kCpuFlash1: return "flashtile-cpu-fa1";
    case Backend::kCpuReference: return "flashtile-cpu-reference";
    case Backend::kCudaSm80: return "flashtile-sm80";
    case Backend::kCudaSm90: return "flashtile-sm90";
    case Backend::kAuto: break;
  }
  return "flashtile-auto";
}

// One JSON object on one line, fields in insertion order.
class JsonLine {
 public:
  JsonLine& text(const std::string& key, const std::string& value) {
    std::string escaped;
    for (char ch : value) {
      if (ch == '"' || ch == '\\') escaped += '\\';
      if (static_cast<unsigned char>(ch) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        escaped += buf;
      } else {
        escaped += ch;
      }
    }
    return raw(key, "\"" + escaped + "\"");
  }
  JsonLine& number(const std::string& key, double value) {
    std::ostringstream s;
    s.precision(6);
    s << value;
    return raw(key, std::isfinite(value) ? s.str() : "null");
  }
  JsonLine& integer(const std::string& key, int64_t value) { return raw(key, std::to_string(value)); }
  JsonLine& boolean(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonLine& raw(const std::string& key, const std::string& value) {
    body_ += (body_.empty() ? "\"" : ", \"") + key + "\": " + value;
    return *this;
  }
  std::string body_;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
  return buf;
}

// The "env" object that opens a results file: the machine, the build and the date.
std::string env_line(int32_t threads) {
  std::string device_note;
  const bool has_device = verify::cuda_available(&device_note);
  JsonLine env;
  env.text("kind", "env");
  if (has_device) env.text("gpu", gpu::device_name());
  env.text("cpu", cpu_model()).integer("cores", std::thread::hardware_concurrency());
  env.integer("threads", resolved_threads(threads)).text("flashtile", version());
  env.text("compiler", FLASHTILE_TOOL_COMPILER).text("build", FLASHTILE_TOOL_BUILD_TYPE).text("libs", build_info());
  env.text("cuda", has_device ? "device present" : device_note).text("date", today());
  return env.str();
}

// What one measured case contributes to the closing table.
struct Result {
  std::string row_key;  // dtype, shape and mask: the table's row
  Backend backend = Backend::kAuto;
  double fwd_ms = NAN, fwd_tflops = NAN, bwd_ms = NAN, bwd_tflops = NAN;
  bool failed = false;       // the case (forward, or a backward that should have run) failed
  std::string bwd_missing;   // why the backward column is empty: "unsupported" (the library refused), "failed"
};

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Times forward calls (`call`: one warm-up, then `repeats`) on pl and checks `verify_rows` sampled rows of the
// output against the float64 oracle, recording both in r, rec and the progress line. False when a call failed.
bool measure_forward(const Placement& pl, const verify::Case& c, const std::function<Status(const InputSet&)>& call,
                     int repeats, int64_t verify_rows, uint64_t seed, Result* r, JsonLine* rec) {
  Timing fwd;
  if (Status s = time_calls(pl, call, repeats, &fwd, /*sustained=*/true); !s.ok()) {
    r->failed = true;
    rec->text("error", s.message);
    std::fprintf(stderr, "error: %s", s.message.c_str());
    return false;
  }
  r->fwd_ms = fwd.median_ms();
  r->fwd_tflops = headline_flops(c.problem) / r->fwd_ms / 1e9;
  rec->number("ms", r->fwd_ms).number("tflops", r->fwd_tflops);
  rec->number("fwd_ms", r->fwd_ms).number("fwd_tflops", r->fwd_tflops);
  rec->integer("repeats", static_cast<int64_t>(fwd.ms.size()));
  if (fwd.extra_bytes >= 0) rec->number("extra_mib", static_cast<double>(fwd.extra_bytes) / (1 << 20));
  if (pl.on_device) rec->integer("input_sets", static_cast<int64_t>(pl.sets.size()));
  std::fprintf(stderr, "%s ms (%.3f TFLOP/s)", format_ms(r->fwd_ms).c_str(), r->fwd_tflops);

  if (verify_rows > 0) {
    // A wrong fast kernel must not make a fast table. sample_rows gives the first and last rows and `count` more.
    const std::vector<verify::RowSample> rows =
        verify::sample_rows(c.problem, static_cast<int>(std::max<int64_t>(verify_rows - 2, 0)), seed);
    const Status fetched = fetch_outputs(pl);
    const verify::CheckResult check = fetched.ok() ? verify::check_rows(c, rows) : verify::CheckResult{};
    const bool ok = fetched.ok() && check.pass();
    rec->boolean("verified", ok);
    if (!ok) {
      r->failed = true;
      rec->text("verify_error", fetched.ok() ? check.summary() : fetched.message);
      std::fprintf(stderr, ", VERIFY FAILED: %s", fetched.ok() ? check.summary().c_str() : fetched.message.c_str());
    }
  }
  return true;
}

// Markdown: one row per (dtype, shape, mask), per backend "TFLOP/s (ms)", and the FA2/FA1 speed ratio
// (FA1 time over FA2 time) when both schedules ran.
std::string table(const std::vector<Result>& results, const std::vector<Backend>& backends, bool with_backward) {
  std::vector<std::string> rows;
  std::map<std::pair<std::string, Backend>, const Result*> cell;
  for (const Result& r : results) {
    if (std::find(rows.begin(), rows.end(), r.row_key) == rows.end()) rows.push_back(r.row_key);
    cell[{r.row_key, r.backend}] = &r;
  }
  const bool ratio = std::count(backends.begin(), backends.end(), Backend::kCpuFlash2) &&
                     std::count(backends.begin(), backends.end(), Backend::kCpuFlash1);
  std::ostringstream s;
  s << "| dtype | shape | mask |";
  for (Backend b : backends) {
    s << " " << impl_name(b) << " fwd TFLOP/s (ms) |";
    if (with_backward && b != Backend::kCpuFlash1) s << " " << impl_name(b) << " bwd TFLOP/s (ms) |";
  }
  if (ratio) s << " FA2/FA1 fwd speed |";
  s << "\n|---|---|---|";
  for (Backend b : backends) s << (with_backward && b != Backend::kCpuFlash1 ? "---|---|" : "---|");
  s << (ratio ? "---|\n" : "\n");
  for (const std::string& row : rows) {
    s << "| " << row << " |";
    for (Backend b : backends) {
      const auto it = cell.find({row, b});
      const Result* r = it == cell.end() ? nullptr : it->second;
      const bool fwd_ok = r && std::isfinite(r->fwd_ms) && !(r->failed && r->bwd_missing.empty());
      if (!fwd_ok) s << " failed |";
      else s << " " << fixed(r->fwd_tflops, 3) << " (" << format_ms(r->fwd_ms) << ") |";
      if (with_backward && b != Backend::kCpuFlash1) {
        if (!fwd_ok) s << " failed |";
        else if (!r->bwd_missing.empty()) s << " " << r->bwd_missing << " |";
        else s << " " << fixed(r->bwd_tflops, 3) << " (" << format_ms(r->bwd_ms) << ") |";
      }
    }
    if (ratio) {
      const auto fa2 = cell.find({row, Backend::kCpuFlash2}), fa1 = cell.find({row, Backend::kCpuFlash1});
      const bool both = fa2 != cell.end() && fa1 != cell.end() && !fa2->second->failed && !fa1->second->failed;
      s << " " << (both ? fixed(fa1->second->fwd_ms / fa2->second->fwd_ms, 2) + "x" : "-") << " |";
    }
    s << "\n";
  }
  return s.str();
}

// ---- --ablation: the seeds' FA1-vs-FA2 comparison on the GPU ------------------------------------------------

// The sm80 v2 kernel, v2 with one of the seeds' v2 changes undone, and FA1 built from the same pieces.
struct AblationColumn {
  gpu::FwdVariant variant;
  const char* impl;   // peers.py's impl field
  const char* title;  // the table's column
};
constexpr AblationColumn kAblation[] = {
    {gpu::FwdVariant::kV2, "flashtile-sm80-v2", "v2"},
    {gpu::FwdVariant::kRescaleEveryStep, "flashtile-sm80-v2-rescale-every-step", "v2 + rescale every step"},
    {gpu::FwdVariant::kSequentialQBlocks, "flashtile-sm80-v2-no-seq-parallel", "v2 without seq parallelism"},
    {gpu::FwdVariant::kFlash1, "flashtile-sm80-fa1", "FA1 schedule"},
};
constexpr size_t kAblationColumns = std::size(kAblation);

struct AblationRow {
  std::string key;  // shape and mask
  std::array<Result, kAblationColumns> cells;
};

// Markdown: per variant "TFLOP/s (ms)", and beside each change its TFLOP/s over v2's.
std::string ablation_table(const std::vector<AblationRow>& rows) {
  std::ostringstream s;
  s << "| shape | mask |";
  for (const AblationColumn& col : kAblation)
    s << " " << col.title << " TFLOP/s (ms) |" << (col.variant == gpu::FwdVariant::kV2 ? "" : " vs v2 |");
  s << "\n|---|---|";
  for (const AblationColumn& col : kAblation) s << (col.variant == gpu::FwdVariant::kV2 ? "---|" : "---|---|");
  s << "\n";
  for (const AblationRow& row : rows) {
    const Result& v2 = row.cells[0];
    s << "| " << row.key << " |";
    for (size_t i = 0; i < kAblationColumns; ++i) {
      const Result& r = row.cells[i];
      if (r.failed) s << " failed |";
      else s << " " << fixed(r.fwd_tflops, 1) << " (" << format_ms(r.fwd_ms) << ") |";
      if (i > 0) s << " " << (r.failed || v2.failed ? "-" : fixed(r.fwd_tflops / v2.fwd_tflops, 2) + "x") << " |";
    }
    s << "\n";
  }
  s << "\nThe middle columns undo one of v2's changes inside the v2 kernel; the last is FA1's schedule (one CTA per\n"
       "(batch, head), K/V blocks as the outer loop, O, m and l rescaled through global memory at every step).\n";
  return s.str();
}

// Grid A's D = 128 shapes at S = 512, 2k and 8k (B = 16384 / S, H = 16), causal and not, bf16, each variant
// timed on the GPU and its output checked like any bench case. Rows go to `out` under grid "A".
int ablation_sweep(std::ofstream& out, const std::string& out_path, const std::string& table_path, int repeats,
                   int64_t verify_rows) {
  out << env_line(0) << "\n";
  std::vector<AblationRow> rows;
  const size_t total = 3 * 2 * kAblationColumns;
  size_t index = 0;
  uint64_t seed = 0;
  bool any_failed = false;
  for (int64_t seqlen : {512, 2048, 8192}) {
    const Shape sh{16384 / seqlen, seqlen, 16, 16, 128};
    verify::Problem problem;
    problem.batch = sh.batch, problem.seqlen_q = problem.seqlen_k = sh.seqlen;
    problem.heads_q = sh.heads, problem.heads_kv = sh.heads_kv;
    problem.head_dim = problem.head_dim_v = sh.head_dim;
    problem.dtype = DType::kBFloat16;
    verify::Case c = verify::Case::make(problem, seed, false);
    for (bool causal : {false, true}) {
      c.problem.options.causal = causal;
      rows.push_back({shape_text(sh) + " | " + (causal ? "causal" : "full"), {}});
      for (size_t i = 0; i < kAblationColumns; ++i) {
        const AblationColumn& col = kAblation[i];
        std::fprintf(stderr, "[%zu/%zu] %s %s bf16 %s ... ", ++index, total, shape_text(sh).c_str(),
                     causal ? "causal" : "full", col.title);
        std::fflush(stderr);
        Result& r = rows.back().cells[i];
        JsonLine rec;
        rec.text("kind", "attn").text("grid", "A").text("impl", col.impl).text("dtype", dtype_name(problem.dtype));
        rec.integer("B", sh.batch).integer("S", sh.seqlen).integer("H", sh.heads).integer("Hkv", sh.heads_kv);
        rec.integer("D", sh.head_dim).boolean("causal", causal);
        // Fresh NaN in the outputs, so rows a variant leaves unwritten cannot pass with the last one's values.
        c.out.poison();
        c.lse.poison();
        Placement pl;
        std::string note;
        if (Status s = place(c, Backend::kCudaSm80, 0, false, &pl, &note); !s.ok()) {
          r.failed = true;
          rec.text("error", s.message);
          std::fprintf(stderr, "error: %s", s.message.c_str());
        } else {
          const auto call = [&](const InputSet& set) { return gpu::forward_variant(col.variant, set.fwd); };
          measure_forward(pl, c, call, repeats, verify_rows, seed, &r, &rec);
        }
        any_failed = any_failed || r.failed;
        std::fprintf(stderr, "\n");
        out << rec.str() << "\n" << std::flush;
      }
    }
    ++seed;
  }
  const std::string md = ablation_table(rows);
  const std::string heading = "ablation on " + gpu::device_name() + ", bf16, D=128, flashtile " + version() + ", " +
                              today() + "; TFLOP/s by the headline count (median ms in parentheses)";
  std::printf("\n%s\n\n%s", heading.c_str(), md.c_str());
  std::ofstream(table_path) << heading << "\n\n" << md;
  std::printf("\nresults: %s (JSON lines), %s (this table)\n", out_path.c_str(), table_path.c_str());
  return any_failed ? kExitFailed : kExitOk;
}

}  // namespace

int bench_command(const std::vector<std::string>& args) {
  std::string grid_name, shapes_text, out_path, backends_text, dtypes_text, causal_text;
  bool compare_schedules = false, with_backward = false, deterministic = false, ablation = false;
  int64_t repeats = -1, verify_rows = 16;  // repeats -1: kHostRepeats or kDeviceRepeats, where a case runs
  int32_t threads = 0;

  OptionSet o("bench",
              "Sweeps a grid of BENCHMARKS.md (or --shapes) over backends, timing each case (1 warm-up, then the\n"
              "median of --repeats calls; on a GPU, as peers.py times, ~50 ms of untimed calls and >= 200 ms of\n"
              "timed ones, the count recorded as \"repeats\") and checking a few output rows against the float64\n"
              "oracle. Writes one JSON object per line (bench/peers.py's field names, an \"env\" object first) and\n"
              "prints a markdown table, also written beside the JSON as FILE.md. Progress goes to stderr.");
  o.add({"--grid", "-g", "NAME", "C (CPU) | A | L | G; A, L and G are GPU-sized and take hours on CPU cores [C]",
         [&](const std::string& v) { grid_name = v; }});
  o.add({"--shapes", "", "LIST", "instead of a grid: \"B,S,H,D[,Hkv];...\" (4k = 4096), recorded as grid \"custom\"",
         [&](const std::string& v) { shapes_text = v; }});
  o.add({"--backends", "", "LIST", "comma-separated backends (see flashtile run --help) [cpu-flash2; grid C adds cpu-flash1]",
         [&](const std::string& v) { backends_text = v; }});
  o.flag("--schedules", "", "add cpu-flash1, so the FA1-vs-FA2 schedule comparison is in the output",
         [&] { compare_schedules = true; });
  o.flag("--compare-schedules", "", "same as --schedules", [&] { compare_schedules = true; });
  o.flag("--ablation", "", "instead of a grid: the seeds' FA1-vs-FA2 ablation of the sm80 kernel on the GPU",
         [&] { ablation = true; });
  o.add({"--dtype", "", "LIST", "fp32,fp16,bf16 (comma-separated) [grid C: fp32,bf16; others: bf16]",
         [&](const std::string& v) { dtypes_text = v; }});
  o.add({"--causal", "", "WHICH", "both | on | off [the grid's: both, G: on]", [&](const std::string& v) { causal_text = v; }});
  o.add({"--repeats", "-r", "N",
         "timed calls per case after one warm-up; the median is recorded [5; 20 on a GPU];\n"
         "                          on a GPU also >= 200 ms of them after ~50 ms untimed, as peers.py times",
         [&](const std::string& v) { repeats = parse_int("--repeats", v, 1, 1000000); }});
  o.add({"--threads", "-t", "N", "CPU threads; 0 = all cores (OMP_NUM_THREADS is honoured) [0]",
         [&](const std::string& v) { threads = static_cast<int32_t>(parse_int("--threads", v, 0, 4096)); }});
  o.flag("--backward", "", "also time the backward (bwd_ms, bwd_tflops; cpu-flash1 has none)",
         [&] { with_backward = true; });
  o.flag("--deterministic", "", "with --backward: bitwise-reproducible gradients (CUDA: dQ's additions in a fixed "
         "order), to time what that mode costs", [&] { deterministic = true; });
  o.add({"--verify-rows", "", "N",
         "rows per case checked against the float64 oracle, first and last included; 0 = no check [16]",
         [&](const std::string& v) { verify_rows = parse_int("--verify-rows", v, 0, 1000000); }});
  o.add({"--out", "-o", "FILE", "JSON lines go here, the table to FILE.md [bench-results.jsonl]",
         [&](const std::string& v) { out_path = v; }});
  o.add_note("TFLOP/s use the headline count 4*B*H*S*S*D, halved for causal (backward: 2.5x), as peers.py does.\n"
             "JSON fields: kind (\"cpu\", or \"attn\" for CUDA backends), grid, impl (flashtile-cpu = cpu-flash2,\n"
             "flashtile-cpu-fa1 = cpu-flash1), threads, dtype, B, S, H, Hkv, D, causal, ms, tflops, fwd_ms,\n"
             "fwd_tflops, extra_mib (peak extra memory of a call), input_sets (GPU), verified, and bwd_ms, bwd_tflops,\n"
             "deterministic with --backward. On a GPU, calls are timed with CUDA events, and inputs smaller than L2\n"
             "are rotated among copies (input_sets) so that no call finds them in L2 (BENCHMARKS.md).");
  o.add_note("--ablation: grid A's D=128 shapes at S = 512, 2k, 8k, causal and not, bf16, through the sm80 v2\n"
             "kernel (impl flashtile-sm80-v2), v2 renormalising O after every K/V block as FA1 does\n"
             "(flashtile-sm80-v2-rescale-every-step), and v2 with one CTA per (batch, head) walking all its query\n"
             "blocks, FA1's grid (flashtile-sm80-v2-no-seq-parallel), and the FA1 schedule itself built from the\n"
             "same pieces (flashtile-sm80-fa1). Needs a CUDA build and a GPU; takes --repeats, --verify-rows and\n"
             "--out.");
  o.add_example("flashtile bench --grid C", "grid C, FA2 and FA1 schedules, fp32 and bf16, 5 repeats");
  o.add_example("flashtile bench --grid C --dtype bf16 --causal on --repeats 3 -o c.jsonl", "a quarter of grid C");
  o.add_example("flashtile bench --shapes \"1,2k,16,128;2,1k,32,64,8\" --backward --schedules",
                "two custom shapes, forward and backward, both schedules");
  o.add_example("flashtile bench --grid A --backends cuda-sm80 --dtype bf16,fp16 -o a.jsonl",
                "grid A forward on the GPU, 20 repeats per case");
  o.add_example("flashtile bench --ablation -o ablation.jsonl", "the FA1-vs-FA2 ablation on the GPU");
  if (!o.parse(args)) {
    std::cout << o.help();
    return kExitOk;
  }

  if (ablation) {
    if (!grid_name.empty() || !shapes_text.empty() || !backends_text.empty() || !dtypes_text.empty() ||
        !causal_text.empty() || compare_schedules || with_backward || deterministic)
      throw UsageError("--ablation runs its own sweep; it takes only --repeats, --verify-rows and --out");
    if (!cuda_backend_compiled()) {
      std::fprintf(stderr, "flashtile bench: --ablation times the sm80 kernels and needs a CUDA build "
                           "(configure with -DFLASHTILE_ENABLE_CUDA=ON)\n");
      return kExitFailed;
    }
    if (std::string why; !verify::cuda_available(&why)) {
      std::fprintf(stderr, "flashtile bench: --ablation needs a usable CUDA GPU: %s\n", why.c_str());
      return kExitFailed;
    }
  }
  if (!grid_name.empty() && !shapes_text.empty()) throw UsageError("give --grid or --shapes, not both");
  Grid grid = shapes_text.empty() ? named_grid(grid_name.empty() ? "C" : grid_name)
                                  : Grid{"custom", parse_shapes(shapes_text), {DType::kBFloat16}, {false, true},
                                         {Backend::kCpuFlash2}, false};
  if (!dtypes_text.empty()) {
    grid.dtypes.clear();
    for (const std::string& d : split(dtypes_text, ',')) grid.dtypes.push_back(parse_dtype("--dtype", d));
  }
  if (causal_text == "on") grid.causal = {true};
  else if (causal_text == "off") grid.causal = {false};
  else if (causal_text == "both") grid.causal = {false, true};
  else if (!causal_text.empty()) throw UsageError("--causal: '" + causal_text + "' is not both, on or off");
  if (!backends_text.empty()) {
    grid.backends.clear();
    for (const std::string& b : split(backends_text, ',')) grid.backends.push_back(parse_backend("--backends", b));
  }
  if (compare_schedules && !std::count(grid.backends.begin(), grid.backends.end(), Backend::kCpuFlash1))
    grid.backends.push_back(Backend::kCpuFlash1);
  // A CUDA backend without a usable GPU would fail every case: said once, before any case runs or file is written.
  if (const auto cuda = std::find_if(grid.backends.begin(), grid.backends.end(), is_cuda); cuda != grid.backends.end())
    if (std::string why; !verify::cuda_available(&why)) {
      std::fprintf(stderr, "flashtile bench: backend %s: %s\n", backend_name(*cuda), why.c_str());
      return kExitFailed;
    }
  if (out_path.empty()) {
    out_path = "bench-results.jsonl";
    std::fprintf(stderr, "no --out given: writing results to ./%s\n", out_path.c_str());
  }
  const std::string table_path =
      (out_path.size() > 6 && out_path.compare(out_path.size() - 6, 6, ".jsonl") == 0
           ? out_path.substr(0, out_path.size() - 6)
           : out_path) + ".md";
  std::ofstream out(out_path);
  if (!out) {
    std::fprintf(stderr, "flashtile bench: cannot write %s\n", out_path.c_str());
    return kExitFailed;
  }
  freeze_malloc_thresholds();
  if (ablation)
    return ablation_sweep(out, out_path, table_path, repeats < 0 ? kDeviceRepeats : static_cast<int>(repeats),
                          verify_rows);

  std::string device_note;
  const bool has_device = verify::cuda_available(&device_note);
  // Where a backend will run: the device for cuda-*, and for auto when a GPU is present.
  const auto on_device = [&](Backend b) { return is_cuda(b) || (b == Backend::kAuto && has_device); };
  const auto repeats_on = [&](bool device) {
    return repeats > 0 ? static_cast<int>(repeats) : device ? kDeviceRepeats : kHostRepeats;
  };
  const size_t total = grid.dtypes.size() * grid.shapes.size() * grid.causal.size() * grid.backends.size();
  double flops_per_dtype = 0, calls_per_shape = 0;  // FLOPs of every call the sweep makes, warm-ups included
  for (const Shape& sh : grid.shapes)
    for (bool causal : grid.causal)
      flops_per_dtype += 4.0 * sh.batch * sh.heads * sh.seqlen * sh.seqlen * sh.head_dim / (causal ? 2 : 1);
  for (Backend b : grid.backends) calls_per_shape += repeats_on(on_device(b)) + 1;
  const double work =
      flops_per_dtype * static_cast<double>(grid.dtypes.size()) * calls_per_shape * (with_backward ? 3.5 : 1);
  std::fprintf(stderr, "grid %s: %zu cases, %s of work in all\n", grid.name.c_str(), total, format_flops(work).c_str());
  if (grid.gpu_sized && !std::all_of(grid.backends.begin(), grid.backends.end(), on_device))
    std::fprintf(stderr, "warning: grid %s is sized for a GPU; at the CPU backends' fraction of a TFLOP/s this runs for "
                         "hours (use --grid C or --shapes)\n", grid.name.c_str());
  out << env_line(threads) << "\n";

  const auto forward_call = [](const InputSet& set) { return forward(set.fwd); };
  const auto backward_call = [](const InputSet& set) { return flashtile::backward(set.bwd); };
  std::vector<Result> results;
  size_t index = 0;
  uint64_t seed = 0;  // inputs differ between shapes, and are the same in every run of the sweep
  bool any_failed = false;
  for (DType dtype : grid.dtypes)
    for (const Shape& sh : grid.shapes) {
      verify::Problem problem;
      problem.batch = sh.batch, problem.seqlen_q = problem.seqlen_k = sh.seqlen;
      problem.heads_q = sh.heads, problem.heads_kv = sh.heads_kv;
      problem.head_dim = problem.head_dim_v = sh.head_dim;
      problem.dtype = dtype;
      problem.deterministic = deterministic;
      // One set of inputs per shape and dtype, shared by its masks and backends: making them costs more than
      // a small case's timing.
      verify::Case c = verify::Case::make(problem, seed, with_backward);
      for (bool causal : grid.causal)
        for (Backend backend : grid.backends) {
          c.problem.options.causal = causal;
          std::fprintf(stderr, "[%zu/%zu] %s %s %s %s ... ", ++index, total, shape_text(sh).c_str(),
                       causal ? "causal" : "full", short_dtype_name(dtype), backend_name(backend));
          std::fflush(stderr);

          Result r;
          r.row_key = std::string(short_dtype_name(dtype)) + " | " + shape_text(sh) + " | " + (causal ? "causal" : "full");
          r.backend = backend;
          // Fresh NaN in the outputs, so rows a backend leaves unwritten cannot pass with the last one's values.
          c.out.poison();
          c.lse.poison();
          JsonLine rec;
          Placement pl;
          std::string note;
          const Status placed = place(c, backend, threads, with_backward, &pl, &note);
          const bool device = placed.ok() ? pl.on_device : is_cuda(backend);
          rec.text("kind", device ? "attn" : "cpu").text("grid", grid.name);
          rec.text("impl", impl_name(placed.ok() ? pl.chosen : backend));
          if (!device) rec.integer("threads", resolved_threads(threads));
          if (!note.empty()) rec.text("note", note);  // why auto passed a CUDA device over
          rec.text("dtype", dtype_name(dtype)).integer("B", sh.batch).integer("S", sh.seqlen).integer("H", sh.heads);
          rec.integer("Hkv", sh.heads_kv).integer("D", sh.head_dim).boolean("causal", causal);
          if (with_backward) rec.boolean("deterministic", deterministic);

          if (!placed.ok()) {
            r.failed = true;
            rec.text("error", placed.message);
            std::fprintf(stderr, "error: %s", placed.message.c_str());
          } else if (measure_forward(pl, c, forward_call, repeats_on(device), verify_rows, seed, &r, &rec) &&
                     with_backward) {
            Backend bwd_backend = Backend::kAuto;
            Timing bwd;
            Status s = select_backward_backend(pl.sets[0].bwd, &bwd_backend);
            if (s.ok()) s = time_calls(pl, backward_call, repeats_on(device), &bwd, /*sustained=*/true);
            if (s.ok()) {
              r.bwd_ms = bwd.median_ms();
              r.bwd_tflops = 2.5 * headline_flops(c.problem) / r.bwd_ms / 1e9;
              rec.number("bwd_ms", r.bwd_ms).number("bwd_tflops", r.bwd_tflops);
              std::fprintf(stderr, ", bwd %s ms (%.3f TFLOP/s)", format_ms(r.bwd_ms).c_str(),
                           r.bwd_tflops);
            } else if (backend == Backend::kCpuFlash1) {
              rec.text("bwd_error", s.message);  // expected: the FA1 schedule is forward-only
            } else if (s.code == StatusCode::kUnsupported) {  // e.g. the CUDA backward's head dims: not a failure
              r.bwd_missing = "unsupported";
              rec.text("bwd_error", s.message);
              std::fprintf(stderr, ", backward unsupported: %s", s.message.c_str());
            } else {
              r.failed = true;
              r.bwd_missing = "failed";
              rec.text("bwd_error", s.message);
              std::fprintf(stderr, ", backward error: %s", s.message.c_str());
            }
          }
          any_failed = any_failed || r.failed;
          std::fprintf(stderr, "\n");
          out << rec.str() << "\n" << std::flush;
          results.push_back(r);
        }
      ++seed;
    }

  const std::string md = table(results, grid.backends, with_backward);
  const std::string machine = has_device ? cpu_model() + ", " + gpu::device_name() : cpu_model();
  std::printf("\ngrid %s, %d threads, TFLOP/s by the headline count (median ms in parentheses)\n\n%s",
              grid.name.c_str(), resolved_threads(threads), md.c_str());
  std::ofstream(table_path) << "grid " << grid.name << ", " << machine << ", " << resolved_threads(threads)
                            << " threads, flashtile " << version() << ", " << today()
                            << "; TFLOP/s by the headline count (median ms in parentheses)\n\n" << md;
  std::printf("\nresults: %s (JSON lines), %s (this table)\n", out_path.c_str(), table_path.c_str());
  return any_failed ? kExitFailed : kExitOk;
}

}  // namespace flashtile::tool
