// Hand-written option parsing for the `flashtile` command. Each subcommand declares its options once, as a
// table; the same table parses argv and prints --help, so the help text cannot drift from what is accepted.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashtile/flashtile.hpp"
#include "verify/verify.hpp"

namespace flashtile::tool {

// A bad option or value. main() prints the message plus "see flashtile <cmd> --help" and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Exit codes shared by every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // a library error, a verification failure, a failed check
constexpr int kExitUsage = 2;   // bad command line

struct Option {
  std::string name;        // "--seqlen"
  std::string short_name;  // "-s", or empty
  std::string value;       // metavariable shown in help ("N", "L,R"); empty for a flag
  std::string help;        // one line, ending with the default where there is one
  std::function<void(const std::string&)> apply;  // receives the value ("" for a flag); throws UsageError
};

class OptionSet {
 public:
  OptionSet(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  void add(Option option) { options_.push_back(std::move(option)); }
  void flag(std::string name, std::string short_name, std::string help, std::function<void()> apply);
  void add_example(std::string line, std::string what) { examples_.push_back({std::move(line), std::move(what)}); }
  void add_note(std::string note) { notes_.push_back(std::move(note)); }

  // Applies args in order ("--name value", "--name=value", "-s value"). Returns false when --help/-h was
  // asked for (the caller prints help() and exits 0). Throws UsageError.
  bool parse(const std::vector<std::string>& args) const;
  std::string help() const;

 private:
  const Option* find(const std::string& spelled) const;
  std::string command_, summary_;
  std::vector<Option> options_;
  std::vector<std::pair<std::string, std::string>> examples_;
  std::vector<std::string> notes_;
};

// ---- values -----------------------------------------------------------------------------------------------
// Each names the option in its error so the one-line message says what to fix.

// An integer in [lo, hi]; a trailing k multiplies by 1024 (sequence lengths: "4k" = 4096).
int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi);
// A seed: any uint64, digits only (no k suffix: a seed names a stream of random numbers, not a size).
uint64_t parse_seed(const std::string& option, const std::string& text);
double parse_double(const std::string& option, const std::string& text, double lo, double hi);
DType parse_dtype(const std::string& option, const std::string& text);         // fp32 | fp16 | bf16
Backend parse_backend(const std::string& option, const std::string& text);     // auto | cpu-flash2 | ...
bool is_cuda(Backend backend);                                                 // cuda-sm80, cuda-sm90
std::vector<std::string> split(const std::string& text, char sep);             // "" gives no items
const char* short_dtype_name(DType dtype);                                     // bf16, for compact lines

// ---- the shape options shared by `run` (and the defaults of its representative problem) -------------------

struct ShapeOptions {
  int64_t batch = 1, seqlen = 4096, seqlen_k = -1, heads = 16, heads_kv = -1, head_dim = 128, head_dim_v = -1;
  DType dtype = DType::kBFloat16;
  bool causal = true;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  Backend backend = Backend::kAuto;
  int32_t threads = 0;

  void add_to(OptionSet& options);
  // -1 fields resolved (seqlen_k = seqlen, heads_kv = heads, ...). Throws UsageError where the options alone
  // make the problem invalid (--heads not a multiple of --heads-kv).
  verify::Problem problem() const;
};

}  // namespace flashtile::tool
