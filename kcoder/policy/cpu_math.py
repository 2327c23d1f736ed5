"""Branch-free float32 transcendental functions for the cpu target's C++ (CPU_MATH).

libm's expf/logf/log1pf/expm1f/erff/tanhf are scalar calls (glibc's vector versions need
-ffast-math, which would also drop NaN semantics), so one of them in an `omp simd` loop keeps
the whole loop scalar: a mish + bias + clamp over 2048 x 4096 ran at 0.3-0.4x eager. These
versions are plain arithmetic and selects, which GCC vectorizes at full width; `#define`s
after them replace libm's names in the op table's expressions (ops.py writes libm names, the
CUDA text uses the real ones). Accuracy against float64 (tests/policy/test_cpu_math.py):
expf, logf, log1pf, expm1f, tanhf within a few ulp; erff absolute error <= 3e-7. NaN
propagates; overflow and the edges of each domain give what libm gives (inf, -inf, -1, NaN).

- expf: n = round(x / ln2), r = x - n ln2 (ln2 in two parts), e^r by a degree-6 polynomial,
  2^n built in the exponent bits of two factors (n = 128 and subnormal results have no
  single float).
- logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f) with f = m - 1
  (the classic Cephes degree-8 minimax polynomial), plus e ln2 in two parts; subnormals are
  scaled by 2^23 first.
- log1pf: u = 1 + x rounded, log(u) * x / (u - 1): the quotient corrects u's rounding (Goldberg).
- expm1f: the Taylor series to x^8 for |x| < 0.5 (truncation < 1.2e-8 relative), e^x - 1 beyond.
- tanhf: 1 - 2 / (e^2x + 1); for |x| < 0.3, where that cancels, its Taylor series to x^11.
- erff: Abramowitz-Stegun 7.1.26 (absolute error <= 1.5e-7, PyTorch's vectorized CPU erf uses
  it), its Taylor series to x^13 for |x| < 0.5, where that cancels.
"""

CPU_MATH = r"""
namespace kc {
static inline int32_t f2i(float f) { int32_t i; std::memcpy(&i, &f, 4); return i; }
static inline __attribute__((always_inline)) float i2f(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline __attribute__((always_inline)) float expf_(float x) {
  // Clamped where e^x is 0 or inf in float32 anyway, so the 2^n factors below round to exactly
  // that: no select with constant arms (after inlining, GCC turns those into branches and the
  // loop stops vectorizing)
  x = x > 100.0f ? 100.0f : x;
  x = x < -104.0f ? -104.0f : x;
  const float magic = 12582912.0f;
  const float t = x * 1.44269504088896341f + magic;
  const float n = t - magic;
  const int32_t ni = f2i(t) - f2i(magic);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n as two normal factors: n runs from -150 (subnormal results) to 144 (overflow to inf)
  const int32_t h = ni >> 1;
  return (p * i2f((h + 127) << 23)) * i2f((ni - h + 127) << 23);
}
static inline __attribute__((always_inline)) float logf_(float x) {
  const bool sub = x < 1.17549435e-38f;
  const int32_t ix = f2i(sub ? x * 8388608.0f : x);
  int32_t e = ((ix >> 23) & 0xff) - (sub ? 150 : 127);
  float m = i2f((ix & 0x007fffff) | 0x3f800000);
  const bool half = m > 1.41421356f;
  m = half ? m * 0.5f : m;
  e = half ? e + 1 : e;
  const float f = m - 1.0f, z = f * f, fe = (float)e;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * z + fe * -2.12194440e-4f - 0.5f * z;
  y = f + y + fe * 0.693359375f;
  // one float select per condition: && becomes a branch, & of two compares a mask GCC 12
  // cannot convert, and either keeps the loop scalar
  y = x < INFINITY ? y : x;  // inf, NaN
  return x > 0.0f ? y : (x == 0.0f ? -INFINITY : NAN);
}
static inline __attribute__((always_inline)) float log1pf_(float x) {
  const float u = 1.0f + x, d = u - 1.0f;
  const float y = logf_(u) * (x / d);  // d == 0 (inf or NaN here) and x == inf take x instead
  const float z = d == 0.0f ? x : y;
  return x == INFINITY ? x : z;
}
static inline __attribute__((always_inline)) float expm1f_(float x) {
  float p = 1.0f / 40320.0f;
  p = p * x + 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  p = (p * x) * x + x;
  const float big = expf_(x) - 1.0f;
  return fabsf(x) < 0.5f ? p : big;
}
static inline __attribute__((always_inline)) float erff_(float x) {
  const float ax = x < 0.0f ? -x : x, x2 = x * x;
  const float t = 1.0f / (ax * 0.3275911f + 1.0f);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * expf_(-x2);
  float s = 1.0f / 9360.0f;  // Taylor series: 1 - p t e^-x^2 cancels near 0
  s = s * x2 - 1.0f / 1320.0f;
  s = s * x2 + 1.0f / 216.0f;
  s = s * x2 - 1.0f / 42.0f;
  s = s * x2 + 0.1f;
  s = s * x2 - 1.0f / 3.0f;
  const float small = 1.12837916709551257f * (x + x * x2 * s);
  return ax < 0.5f ? small : (x < 0.0f ? -y : y);
}
static inline __attribute__((always_inline)) float tanhf_(float x) {
  const float x2 = x * x;
  float p = -1382.0f / 155925.0f;
  p = p * x2 + 62.0f / 2835.0f;
  p = p * x2 - 17.0f / 315.0f;
  p = p * x2 + 2.0f / 15.0f;
  p = p * x2 - 1.0f / 3.0f;
  const float small = x + x * x2 * p;
  const float big = 1.0f - 2.0f / (expf_(2.0f * x) + 1.0f);
  return (x2 < 0.09f) ? small : big;
}
}  // namespace kc
#define expf kc::expf_
#define logf kc::logf_
#define log1pf kc::log1pf_
#define expm1f kc::expm1f_
#define erff kc::erff_
#define tanhf kc::tanhf_
"""
