#include "cli_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace flashtile::tool {

void OptionSet::flag(std::string name, std::string short_name, std::string help, std::function<void()> apply) {
  add({std::move(name), std::move(short_name), "", std::move(help),
       [apply = std::move(apply)](const std::string&) { apply(); }});
}

const Option* OptionSet::find(const std::string& spelled) const {
  for (const Option& o : options_)
    if (spelled == o.name || (!o.short_name.empty() && spelled == o.short_name)) return &o;
  return nullptr;
}

bool OptionSet::parse(const std::vector<std::string>& args) const {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string spelled = args[i], value;
    bool inline_value = false;
    if (const size_t eq = spelled.find('='); spelled.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = spelled.substr(eq + 1);
      spelled.resize(eq);
      inline_value = true;
    }
    const Option* o = find(spelled);
    if (!o) {
      if (spelled.empty() || spelled[0] != '-') throw UsageError("unexpected argument '" + args[i] + "'");
      throw UsageError("unknown option " + spelled);
    }
    if (o->value.empty()) {
      if (inline_value) throw UsageError(o->name + " takes no value");
    } else if (!inline_value) {
      // A value may itself start with '-' (a window bound of -1), so the next word is taken as it is.
      if (i + 1 >= args.size()) throw UsageError(o->name + " needs a value (" + o->value + ")");
      value = args[++i];
    }
    o->apply(value);
  }
  return true;
}

std::string OptionSet::help() const {
  std::ostringstream s;
  s << "usage: flashtile " << command_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string left = o.short_name.empty() ? "    " + o.name : o.short_name + ", " + o.name;
    if (!o.value.empty()) left += " " + o.value;
    s << "  " << left;
    // Long left columns push the help to the next line rather than misaligning the table.
    if (left.size() < 24) s << std::string(24 - left.size(), ' ');
    else s << "\n  " << std::string(24, ' ');
    s << o.help << "\n";
  }
  s << "  -h, --help              this text\n";
  for (const std::string& n : notes_) s << "\n" << n << "\n";
  if (!examples_.empty()) {
    s << "\nexamples:\n";
    for (const auto& [line, what] : examples_) s << "  " << line << "\n      " << what << "\n";
  }
  return s.str();
}

// ---- values -----------------------------------------------------------------------------------------------

int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  std::string digits = text;
  int64_t unit = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    unit = 1024;
    digits.pop_back();
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(option + ": '" + text + "' is not an integer");
  // The first two keep v within [INT64_MIN / unit, INT64_MAX / unit], so v * unit cannot overflow.
  if (v < lo / unit || v > hi / unit || v * unit < lo || v * unit > hi)
    throw UsageError(option + ": " + text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "]");
  return v * unit;
}

uint64_t parse_seed(const std::string& option, const std::string& text) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  const bool negative =
      text.size() > 1 && text[0] == '-' && text.find_first_not_of("0123456789", 1) == std::string::npos;
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  if (negative || (digits && errno == ERANGE))
    throw UsageError(option + ": " + text + " is out of range [0, " + std::to_string(UINT64_MAX) + "]");
  if (!digits) throw UsageError(option + ": '" + text + "' is not an integer");
  return v;
}

double parse_double(const std::string& option, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) throw UsageError(option + ": '" + text + "' is not a number");
  if (v < lo || v > hi) {
    std::ostringstream s;
    s << option << ": " << text << " is out of range [" << lo << ", " << hi << "]";
    throw UsageError(s.str());
  }
  return v;
}

DType parse_dtype(const std::string& option, const std::string& text) {
  if (text == "fp32" || text == "float32") return DType::kFloat32;
  if (text == "fp16" || text == "float16") return DType::kFloat16;
  if (text == "bf16" || text == "bfloat16") return DType::kBFloat16;
  throw UsageError(option + ": '" + text + "' is not a dtype (fp32, fp16, bf16)");
}

Backend parse_backend(const std::string& option, const std::string& text) {
  for (Backend b : {Backend::kAuto, Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference,
                    Backend::kCudaSm80, Backend::kCudaSm90})
    if (text == backend_name(b)) return b;
  throw UsageError(option + ": '" + text +
                   "' is not a backend (auto, cpu-flash2, cpu-flash1, cpu-reference, cuda-sm80, cuda-sm90)");
}

bool is_cuda(Backend backend) { return backend == Backend::kCudaSm80 || backend == Backend::kCudaSm90; }

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, sep)) out.push_back(item);
  if (text.back() == sep) out.push_back("");  // "a," has an empty last item; the caller's parse reports it
  return out;
}

const char* short_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
  }
  return "?";
}

// ---- shape options ----------------------------------------------------------------------------------------

namespace {
constexpr int64_t kMaxDim = int64_t{1} << 40;  // beyond any memory; the allocation reports what really fails
}

void ShapeOptions::add_to(OptionSet& o) {
  o.add({"--batch", "-b", "N", "batch size [1]", [this](const std::string& v) { batch = parse_int("--batch", v, 1, kMaxDim); }});
  o.add({"--seqlen", "-s", "N", "query length, and key length unless --seqlen-k; 4k = 4096 [4096]",
         [this](const std::string& v) { seqlen = parse_int("--seqlen", v, 1, kMaxDim); }});
  o.add({"--seqlen-k", "", "N", "key/value length, for Sq != Sk [= --seqlen]",
         [this](const std::string& v) { seqlen_k = parse_int("--seqlen-k", v, 1, kMaxDim); }});
  o.add({"--heads", "", "N", "query heads [16]", [this](const std::string& v) { heads = parse_int("--heads", v, 1, kMaxDim); }});
  o.add({"--heads-kv", "", "N", "key/value heads, fewer for GQA/MQA [= --heads]",
         [this](const std::string& v) { heads_kv = parse_int("--heads-kv", v, 1, kMaxDim); }});
  o.add({"--head-dim", "", "N", "head dim of q and k [128]",
         [this](const std::string& v) { head_dim = parse_int("--head-dim", v, 1, kMaxDim); }});
  o.add({"--head-dim-v", "", "N", "head dim of v and out [= --head-dim]",
         [this](const std::string& v) { head_dim_v = parse_int("--head-dim-v", v, 1, kMaxDim); }});
  o.add({"--dtype", "", "T", "fp32 | fp16 | bf16 [bf16]", [this](const std::string& v) { dtype = parse_dtype("--dtype", v); }});
  o.flag("--causal", "", "causal mask, bottom-right aligned (SPEC.md) [on]", [this] { causal = true; });
  o.flag("--no-causal", "", "full attention, no mask", [this] { causal = false; });
  o.add({"--window", "", "L,R",
         "sliding window, inclusive, negative = unbounded side [off]; the default --causal also applies unless "
         "--no-causal",
         [this](const std::string& v) {
           const std::vector<std::string> lr = split(v, ',');
           if (lr.size() != 2) throw UsageError("--window: expected L,R (e.g. 256,0), got '" + v + "'");
           // Any negative bound means unbounded (SPEC.md), and reaches the library as given.
           window_left = parse_int("--window", lr[0], INT64_MIN, kMaxDim);
           window_right = parse_int("--window", lr[1], INT64_MIN, kMaxDim);
         }});
  o.add({"--softcap", "", "X", "logit soft-capping, S = X*tanh(S/X); 0 = off [0]",
         [this](const std::string& v) { softcap = static_cast<float>(parse_double("--softcap", v, 0, 1e30)); }});
  o.add({"--backend", "", "NAME", "auto | cpu-flash2 | cpu-flash1 | cpu-reference | cuda-sm80 | cuda-sm90 [auto]",
         [this](const std::string& v) { backend = parse_backend("--backend", v); }});
  o.add({"--threads", "-t", "N", "CPU threads; 0 = all cores (OMP_NUM_THREADS is honoured) [0]",
         [this](const std::string& v) { threads = static_cast<int32_t>(parse_int("--threads", v, 0, 4096)); }});
}

verify::Problem ShapeOptions::problem() const {
  // Checked here, before the tool allocates and fills the inputs, rather than by the library's first call.
  const int64_t kv = heads_kv < 0 ? heads : heads_kv;
  if (heads % kv != 0)
    throw UsageError("--heads-kv: " + std::to_string(kv) + " does not divide --heads " + std::to_string(heads) +
                     " (GQA/MQA: each key/value head serves a whole group of query heads)");
  verify::Problem p;
  p.batch = batch;
  p.seqlen_q = seqlen;
  p.seqlen_k = seqlen_k < 0 ? seqlen : seqlen_k;
  p.heads_q = heads;
  p.heads_kv = heads_kv < 0 ? heads : heads_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v < 0 ? head_dim : head_dim_v;
  p.dtype = dtype;
  p.options.causal = causal;
  p.options.window_left = window_left;
  p.options.window_right = window_right;
  p.options.softcap = softcap;
  return p;
}

}  // namespace flashtile::tool
