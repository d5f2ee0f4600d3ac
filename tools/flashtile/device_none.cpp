// Built when FLASHTILE_ENABLE_CUDA=OFF: the CUDA backends cannot be given device tensors.
#include "device.hpp"

namespace flashtile::tool::device {

namespace {
Status not_built() {
  return {StatusCode::kUnsupported,
          "this flashtile was built without CUDA (configure with -DFLASHTILE_ENABLE_CUDA=ON)"};
}
}  // namespace

bool available(std::string* why) {
  *why = "CUDA not built in";
  return false;
}

std::string name() { return ""; }

Mirror::~Mirror() = default;
Status Mirror::upload(const Tensor&, Tensor*) { return not_built(); }
Status Mirror::download(const Tensor&, const Tensor&) const { return not_built(); }
Status time_ms(const std::function<Status()>&, double*) { return not_built(); }

}  // namespace flashtile::tool::device
