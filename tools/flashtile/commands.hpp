// The subcommands. Each takes the arguments after its name, returns the process exit code (kExitOk,
// kExitFailed) and throws UsageError for a bad command line; main() turns that into exit code 2.
#pragma once

#include <string>
#include <vector>

namespace flashtile::tool {

int run_command(const std::vector<std::string>& args);    // run.cpp: one problem, timed and verified
int bench_command(const std::vector<std::string>& args);  // bench.cpp: a BENCHMARKS.md grid, JSON lines out
int check_command(const std::vector<std::string>& args);  // check.cpp: randomised sweep against the oracle

}  // namespace flashtile::tool
