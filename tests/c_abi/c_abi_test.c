/* The C ABI (include/flashtile/flashtile.h) as a C program sees it, compiled as C11 with no C++ anywhere:
 * a small GQA causal problem through ft_forward and ft_backward, checked against a naive float64 computation
 * written here; the selector and backend names; and the refusals: a bad call returns FT_INVALID_ARGUMENT
 * with a message and writes nothing, a zero struct_size or a NULL struct is refused, and an older (smaller)
 * struct is read with defaults for the fields it lacks. Prints every failed check; exits nonzero on any. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "flashtile/flashtile.h"

/* B1 Sq5 Sk7 H4/2 D8 Dv6, fp32, causal (bottom-right: row i sees keys j <= i + 2). */
enum { B = 1, SQ = 5, SK = 7, HQ = 4, HKV = 2, D = 8, DV = 6 };

static int failures = 0;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: failed: %s: ", __FILE__, __LINE__, #cond);     \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

static float q[B][SQ][HQ][D], k[B][SK][HKV][D], v[B][SK][HKV][DV], out[B][SQ][HQ][DV], lse[B][HQ][SQ];
static float dout[B][SQ][HQ][DV], dq[B][SQ][HQ][D], dk[B][SK][HKV][D], dv[B][SK][HKV][DV];
static double want_out[SQ][HQ][DV], want_lse[HQ][SQ], want_dq[SQ][HQ][D], want_dk[SK][HKV][D], want_dv[SK][HKV][DV];

/* Deterministic inputs in [-2, 2), never all positive, never zero-heavy. */
static float next_value(unsigned* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)(*state >> 8) / (float)(1u << 24) * 4.0f - 2.0f;
}

static void fill(float* x, size_t n, unsigned* state) {
  for (size_t i = 0; i < n; ++i) x[i] = next_value(state);
}

static void poison(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = NAN;
}

static int all_nan(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!isnan(x[i])) return 0;
  return 1;
}

static int sees(int i, int j) { return j <= i + (SK - SQ); }

/* Exact attention and its gradients in float64, straight from SPEC.md. */
static void naive(void) {
  const double scale = 1.0 / sqrt((double)D);
  memset(want_dq, 0, sizeof want_dq);
  memset(want_dk, 0, sizeof want_dk);
  memset(want_dv, 0, sizeof want_dv);
  for (int h = 0; h < HQ; ++h) {
    const int hk = h / (HQ / HKV);
    for (int i = 0; i < SQ; ++i) {
      double s[SK], p[SK], dp[SK], mx = -INFINITY, sum = 0.0, pdp = 0.0;
      for (int j = 0; j < SK; ++j) {
        if (!sees(i, j)) continue;
        s[j] = 0.0;
        for (int d = 0; d < D; ++d) s[j] += (double)q[0][i][h][d] * k[0][j][hk][d];
        s[j] *= scale;
        mx = s[j] > mx ? s[j] : mx;
      }
      for (int j = 0; j < SK; ++j)
        if (sees(i, j)) sum += exp(s[j] - mx);
      want_lse[h][i] = mx + log(sum);
      for (int d = 0; d < DV; ++d) want_out[i][h][d] = 0.0;
      for (int j = 0; j < SK; ++j) {
        if (!sees(i, j)) continue;
        p[j] = exp(s[j] - mx) / sum;
        dp[j] = 0.0;
        for (int d = 0; d < DV; ++d) {
          want_out[i][h][d] += p[j] * v[0][j][hk][d];
          dp[j] += (double)dout[0][i][h][d] * v[0][j][hk][d];
          want_dv[j][hk][d] += p[j] * dout[0][i][h][d];
        }
        pdp += p[j] * dp[j];
      }
      for (int j = 0; j < SK; ++j) {
        if (!sees(i, j)) continue;
        const double ds = p[j] * (dp[j] - pdp) * scale;
        for (int d = 0; d < D; ++d) {
          want_dq[i][h][d] += ds * k[0][j][hk][d];
          want_dk[j][hk][d] += ds * q[0][i][h][d];
        }
      }
    }
  }
}

/* Largest |got - want| over n elements, NaN counting as infinitely wrong. */
static double max_error(const float* got, const double* want, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double e = fabs((double)got[i] - want[i]);
    if (isnan(e)) return INFINITY;
    worst = e > worst ? e : worst;
  }
  return worst;
}

static ft_fwd_params forward_params(void) {
  const int64_t q_shape[4] = {B, SQ, HQ, D}, k_shape[4] = {B, SK, HKV, D}, v_shape[4] = {B, SK, HKV, DV},
                o_shape[4] = {B, SQ, HQ, DV}, lse_shape[3] = {B, HQ, SQ};
  ft_fwd_params p;
  ft_fwd_params_init(&p);
  ft_tensor_contiguous(&p.q, q, FT_F32, 4, q_shape);
  ft_tensor_contiguous(&p.k, k, FT_F32, 4, k_shape);
  ft_tensor_contiguous(&p.v, v, FT_F32, 4, v_shape);
  ft_tensor_contiguous(&p.out, out, FT_F32, 4, o_shape);
  ft_tensor_contiguous(&p.lse, lse, FT_F32, 3, lse_shape);
  p.options.causal = 1;
  return p;
}

static ft_bwd_params backward_params(void) {
  const ft_fwd_params f = forward_params();
  const int64_t o_shape[4] = {B, SQ, HQ, DV};
  ft_bwd_params p;
  ft_bwd_params_init(&p);
  p.q = f.q, p.k = f.k, p.v = f.v, p.out = f.out, p.lse = f.lse;
  ft_tensor_contiguous(&p.dout, dout, FT_F32, 4, o_shape);
  p.dq = f.q, p.dq.data = dq;
  p.dk = f.k, p.dk.data = dk;
  p.dv = f.v, p.dv.data = dv;
  p.options.causal = 1;
  return p;
}

static void test_defaults(void) {
  ft_fwd_params p;
  memset(&p, 0xab, sizeof p);
  ft_fwd_params_init(&p);
  CHECK(p.struct_size == sizeof p, "struct_size %u", (unsigned)p.struct_size);
  CHECK(isnan(p.options.softmax_scale), "default scale %g", p.options.softmax_scale);
  CHECK(p.options.window_left < 0 && p.options.window_right < 0, "default window");
  CHECK(p.options.causal == 0 && p.options.softcap == 0.0f, "default mask");
  CHECK(p.backend == FT_BACKEND_AUTO && p.num_threads == 0 && p.lse.data == NULL, "default backend");

  const int64_t shape[4] = {2, 3, 4, 5};
  ft_tensor t;
  ft_tensor_contiguous(&t, q, FT_BF16, 4, shape);
  CHECK(t.ndim == 4 && t.dtype == FT_BF16 && t.device == FT_CPU, "tensor header");
  CHECK(t.stride[0] == 60 && t.stride[1] == 20 && t.stride[2] == 5 && t.stride[3] == 1, "contiguous strides");

  CHECK(ft_version() != NULL && ft_version()[0] != '\0', "version string");
  CHECK(strcmp(ft_backend_name(FT_BACKEND_CPU_FLASH1), "cpu-flash1") == 0, "name %s",
        ft_backend_name(FT_BACKEND_CPU_FLASH1));
}

static void test_forward_and_backward(void) {
  const ft_fwd_params f = forward_params();
  char message[256] = "";
  ft_backend chosen = FT_BACKEND_AUTO;
  ft_status s = ft_select_forward_backend(&f, &chosen, message, sizeof message);
  CHECK(s == FT_OK, "select: %d %s", (int)s, message);
  CHECK(chosen == FT_BACKEND_CPU_FLASH2, "auto chose %s", ft_backend_name(chosen));
  CHECK(strcmp(ft_backend_name(chosen), "cpu-flash2") == 0, "%s", ft_backend_name(chosen));

  poison(&out[0][0][0][0], sizeof out / sizeof(float));
  poison(&lse[0][0][0], sizeof lse / sizeof(float));
  s = ft_forward(&f, message, sizeof message);
  CHECK(s == FT_OK, "forward: %d %s", (int)s, message);
  CHECK(max_error(&out[0][0][0][0], &want_out[0][0][0], sizeof out / sizeof(float)) < 1e-5, "out error %g",
        max_error(&out[0][0][0][0], &want_out[0][0][0], sizeof out / sizeof(float)));
  CHECK(max_error(&lse[0][0][0], &want_lse[0][0], sizeof lse / sizeof(float)) < 1e-5, "lse error %g",
        max_error(&lse[0][0][0], &want_lse[0][0], sizeof lse / sizeof(float)));

  const ft_bwd_params b = backward_params();
  size_t bytes = 1;
  s = ft_backward_workspace_size(&b, &bytes, message, sizeof message);
  CHECK(s == FT_OK && bytes == 0, "workspace: %d %s, %zu bytes", (int)s, message, bytes);
  poison(&dq[0][0][0][0], sizeof dq / sizeof(float));
  poison(&dk[0][0][0][0], sizeof dk / sizeof(float));
  poison(&dv[0][0][0][0], sizeof dv / sizeof(float));
  s = ft_backward(&b, message, sizeof message);
  CHECK(s == FT_OK, "backward: %d %s", (int)s, message);
  CHECK(max_error(&dq[0][0][0][0], &want_dq[0][0][0], sizeof dq / sizeof(float)) < 1e-4, "dq error %g",
        max_error(&dq[0][0][0][0], &want_dq[0][0][0], sizeof dq / sizeof(float)));
  CHECK(max_error(&dk[0][0][0][0], &want_dk[0][0][0], sizeof dk / sizeof(float)) < 1e-4, "dk error %g",
        max_error(&dk[0][0][0][0], &want_dk[0][0][0], sizeof dk / sizeof(float)));
  CHECK(max_error(&dv[0][0][0][0], &want_dv[0][0][0], sizeof dv / sizeof(float)) < 1e-4, "dv error %g",
        max_error(&dv[0][0][0][0], &want_dv[0][0][0], sizeof dv / sizeof(float)));
}

static void test_refusals(void) {
  char message[256];
  ft_fwd_params f = forward_params();
  f.k.dtype = FT_F16;
  poison(&out[0][0][0][0], sizeof out / sizeof(float));
  poison(&lse[0][0][0], sizeof lse / sizeof(float));
  message[0] = '\0';
  ft_status s = ft_forward(&f, message, sizeof message);
  CHECK(s == FT_INVALID_ARGUMENT, "k dtype mismatch: %d", (int)s);
  CHECK(strncmp(message, "k:", 2) == 0, "message should name k: \"%s\"", message);
  CHECK(all_nan(&out[0][0][0][0], sizeof out / sizeof(float)) && all_nan(&lse[0][0][0], sizeof lse / sizeof(float)),
        "a refused call wrote its outputs");
  ft_backend chosen = FT_BACKEND_CUDA_SM90;
  s = ft_select_forward_backend(&f, &chosen, NULL, 0);
  CHECK(s == FT_INVALID_ARGUMENT && chosen == FT_BACKEND_CUDA_SM90, "select: %d, chosen %d", (int)s, (int)chosen);

  char small[8];
  s = ft_forward(&f, small, sizeof small);
  CHECK(s == FT_INVALID_ARGUMENT && strlen(small) == sizeof small - 1, "truncated message \"%s\"", small);

  f = forward_params();
  f.struct_size = 0;
  message[0] = '\0';
  s = ft_forward(&f, message, sizeof message);
  CHECK(s == FT_INVALID_ARGUMENT && strstr(message, "struct_size") != NULL, "zero struct_size: %d \"%s\"", (int)s,
        message);
  ft_bwd_params b = backward_params();
  b.struct_size = 0;
  s = ft_backward(&b, message, sizeof message);
  CHECK(s == FT_INVALID_ARGUMENT, "backward, zero struct_size: %d", (int)s);
  s = ft_forward(NULL, message, sizeof message);
  CHECK(s == FT_INVALID_ARGUMENT, "NULL params: %d", (int)s);
  CHECK(all_nan(&out[0][0][0][0], sizeof out / sizeof(float)), "a refused call wrote out");

  b = backward_params();
  b.backend = FT_BACKEND_CPU_FLASH1;
  message[0] = '\0';
  s = ft_backward(&b, message, sizeof message);
  CHECK(s == FT_UNSUPPORTED && strstr(message, "cpu-flash1") != NULL, "flash1 backward: %d \"%s\"", (int)s, message);
}

/* A caller built against an older header passes a struct that ends before `backend`: the library must read
 * only struct_size bytes and take the default (auto) for the rest, here a garbage value it must not see. */
static void test_older_struct(void) {
  ft_fwd_params f = forward_params();
  f.struct_size = (uint32_t)offsetof(ft_fwd_params, backend);
  f.backend = 12345;
  f.num_threads = -7;
  char message[256] = "";
  poison(&out[0][0][0][0], sizeof out / sizeof(float));
  const ft_status s = ft_forward(&f, message, sizeof message);
  CHECK(s == FT_OK, "older struct: %d %s", (int)s, message);
  CHECK(max_error(&out[0][0][0][0], &want_out[0][0][0], sizeof out / sizeof(float)) < 1e-5, "older struct: out");
}

int main(void) {
  unsigned state = 12345u;
  fill(&q[0][0][0][0], sizeof q / sizeof(float), &state);
  fill(&k[0][0][0][0], sizeof k / sizeof(float), &state);
  fill(&v[0][0][0][0], sizeof v / sizeof(float), &state);
  fill(&dout[0][0][0][0], sizeof dout / sizeof(float), &state);
  naive();

  test_defaults();
  test_forward_and_backward();
  test_refusals();
  test_older_struct();

  if (failures) {
    fprintf(stderr, "c_abi_test: %d checks failed\n", failures);
    return 1;
  }
  printf("c_abi_test: all checks passed\n");
  return 0;
}
