// Built when FLASHTILE_ENABLE_CUDA=OFF: nothing runs on a GPU, and every answer says so.
#include "gpu.hpp"

namespace flashtile::tool::gpu {

namespace {
Status not_built() {
  return {StatusCode::kUnsupported,
          "this flashtile was built without CUDA (configure with -DFLASHTILE_ENABLE_CUDA=ON)"};
}
}  // namespace

std::string device_name() { return ""; }
int64_t l2_bytes() { return 0; }
Status time_calls(const std::function<Status(int)>&, int, std::vector<double>*) { return not_built(); }
Status forward_variant(FwdVariant, const ForwardParams&) { return not_built(); }

}  // namespace flashtile::tool::gpu
