// The CPU backend: the float64 oracle and the two flash schedules. Entry points take validated calls.
#pragma once

#include "common/problem.hpp"

namespace flashtile::cpu {

enum class Schedule { kFlash2, kFlash1 };

Status flash_forward(const ForwardParams& params, const Problem& problem, Schedule schedule);
Status flash_backward(const BackwardParams& params, const Problem& problem);

// The oracle as a backend: float64 math, results rounded once to the output dtype.
Status reference_forward(const ForwardParams& params, const Problem& problem);
Status reference_backward(const BackwardParams& params, const Problem& problem);

}  // namespace flashtile::cpu
