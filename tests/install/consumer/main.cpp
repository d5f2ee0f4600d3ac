// Runs one tiny attention call through the installed library, C++ API and C ABI, and checks the answer:
// one query row over two keys, so O and LSE have a closed form. Exits nonzero, saying why, on any mismatch.
#include <flashtile/flashtile.h>
#include <flashtile/flashtile.hpp>

#include <cmath>
#include <cstdio>

int main() {
  float q[4] = {0.5f, -1.0f, 2.0f, 0.25f};
  float k[2][4] = {{1.0f, 0.5f, -0.5f, 2.0f}, {-1.5f, 1.0f, 0.75f, -0.25f}};
  float v[2][3] = {{1.0f, -2.0f, 0.5f}, {3.0f, 0.25f, -1.0f}};
  float out[3] = {}, lse = 0.0f;

  flashtile::ForwardParams p;
  p.q = flashtile::make_tensor(q, flashtile::DType::kFloat32, {1, 1, 1, 4});
  p.k = flashtile::make_tensor(k, flashtile::DType::kFloat32, {1, 2, 1, 4});
  p.v = flashtile::make_tensor(v, flashtile::DType::kFloat32, {1, 2, 1, 3});
  p.out = flashtile::make_tensor(out, flashtile::DType::kFloat32, {1, 1, 1, 3});
  p.lse = flashtile::make_tensor(&lse, flashtile::DType::kFloat32, {1, 1, 1});
  const flashtile::Status s = flashtile::forward(p);
  if (!s.ok()) {
    std::fprintf(stderr, "forward failed: %s\n", s.message.c_str());
    return 1;
  }

  double score[2];
  for (int j = 0; j < 2; ++j) {
    score[j] = 0.0;
    for (int d = 0; d < 4; ++d) score[j] += double(q[d]) * k[j][d];
    score[j] *= 0.5;  // 1 / sqrt(4)
  }
  const double want_lse = std::log(std::exp(score[0]) + std::exp(score[1]));
  int bad = std::fabs(lse - want_lse) > 1e-5;
  for (int d = 0; d < 3; ++d) {
    const double want = std::exp(score[0] - want_lse) * v[0][d] + std::exp(score[1] - want_lse) * v[1][d];
    bad += std::fabs(out[d] - want) > 1e-5;
  }
  if (bad) {
    std::fprintf(stderr, "wrong result: out = (%g, %g, %g), lse = %g (want %g)\n", out[0], out[1], out[2], lse,
                 want_lse);
    return 1;
  }
  std::printf("flashtile %s (C ABI: %s) from the installed package: ok\n", flashtile::version(), ft_version());
  return 0;
}
