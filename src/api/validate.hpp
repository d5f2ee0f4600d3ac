// One place that checks a call against SPEC.md and resolves it into a Problem. Backends may refuse a valid
// Problem (kUnsupported, from the selector), but never see an invalid one.
#pragma once

#include "common/problem.hpp"

namespace flashtile {

Status validate_forward(const ForwardParams& params, Problem* problem);
Status validate_backward(const BackwardParams& params, Problem* problem);

Status invalid_argument(std::string message);
Status unsupported(std::string message);

}  // namespace flashtile
