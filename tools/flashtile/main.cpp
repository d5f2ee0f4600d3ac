// The `flashtile` command: dispatches to a subcommand and turns its failures into exit codes and one-line
// messages. No error escapes as a crash: usage errors exit 2, library and allocation failures exit 1.
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "cli_options.hpp"
#include "commands.hpp"
#include "flashtile/flashtile.hpp"

namespace {

using flashtile::tool::kExitFailed;
using flashtile::tool::kExitOk;
using flashtile::tool::kExitUsage;

struct Command {
  const char* name;
  int (*main)(const std::vector<std::string>&);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"run", flashtile::tool::run_command, "time and verify one problem on the best backend present"},
    {"bench", flashtile::tool::bench_command, "sweep a BENCHMARKS.md grid (or given shapes), write JSON lines"},
    {"check", flashtile::tool::check_command, "randomised correctness sweep against the float64 oracle"},
};

void print_help() {
  std::printf("usage: flashtile <command> [options]\n\n"
              "flashtile %s: exact attention (FlashAttention forward and backward) without an S x S buffer.\n"
              "CUDA backends: %s.\n\ncommands:\n",
              flashtile::version(), flashtile::cuda_backend_compiled() ? "built in" : "not built in");
  for (const Command& c : kCommands) std::printf("  %-8s%s\n", c.name, c.summary);
  std::printf("\n  flashtile <command> --help    that command's options, defaults and examples\n"
              "  flashtile --version           the library version\n\n"
              "examples:\n"
              "  flashtile run -s 1024\n"
              "  flashtile bench --grid C --repeats 3 --out results.jsonl\n"
              "  flashtile check --cases 50 --seed 1234\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "help") args = {args[1], "--help"};  // "flashtile help run"
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") {
    std::printf("flashtile %s\n", flashtile::version());
    return kExitOk;
  }
  for (const Command& c : kCommands) {
    if (args[0] != c.name) continue;
    try {
      return c.main(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (const flashtile::tool::UsageError& e) {
      std::fprintf(stderr, "flashtile %s: %s\nsee flashtile %s --help\n", c.name, e.what(), c.name);
      return kExitUsage;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "flashtile %s: out of memory (the problem's tensors do not fit; try a smaller shape)\n",
                   c.name);
      return kExitFailed;
    }
  }
  std::fprintf(stderr, "flashtile: unknown command '%s'\nsee flashtile --help\n", args[0].c_str());
  return kExitUsage;
}
