// Attention alone, forward + backward: the fused kernel (attention_qkv) against the
// composed ops it replaces (narrow/reshape/transpose, matmul, scaled_softmax, dropout
// mask, matmul), on the attention shapes of issue #14's configs. Prints the shapes and the
// median ms of each path, measured alternately in one run.
//
//   bench_attention [RUNS]      (threads: OMP_NUM_THREADS)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "autograd/ops.h"
#include "nn/layers.h"
#include "tensor/random.h"

using namespace attend;

namespace {

double ms_since(std::chrono::steady_clock::time_point s) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
}

// nn::Attention's composed path, from the packed projections to (B, T, C).
Tensor composed(const Tensor& qkv, int64_t NH, int64_t KVH, double scale, const nn::Dropout& drop) {
  const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (NH + 2 * KVH);
  const int64_t C = NH * HS, kv = KVH * HS, G = NH / KVH;
  Tensor q = transpose(reshape(narrow(qkv, 2, 0, C), {B, T, NH, HS}), 1, 2);
  Tensor k = transpose(reshape(narrow(qkv, 2, C, kv), {B, T, KVH, HS}), 1, 2);
  Tensor v = transpose(reshape(narrow(qkv, 2, C + kv, kv), {B, T, KVH, HS}), 1, 2);
  Tensor s = matmul(reshape(q, {B, KVH, G, T, HS}), transpose(unsqueeze(k, 2), -1, -2));
  Tensor w = drop.forward(scaled_softmax(reshape(s, {B, NH, T, T}), scale, 0));
  Tensor o = reshape(matmul(reshape(w, {B, KVH, G, T, T}), unsqueeze(v, 2)), {B, NH, T, HS});
  return reshape(transpose(o, 1, 2), {B, T, C});
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 9;
  std::printf("attend bench_attention: threads %d, causal, forward + backward, median of %d\n",
              omp_get_max_threads(), runs);
  std::printf("%-30s %4s %5s %4s %4s %4s %5s %10s %10s %8s\n", "case", "B", "T", "NH", "KVH", "HS",
              "drop", "fused ms", "composed", "speedup");
  struct Case {
    const char* name;
    int64_t B, T, NH, KVH, HS;
    double p;
  };
  const Case cases[] = {
      {"C (2 layers: one of them)", 16, 64, 4, 4, 32, 0.0},
      {"A (baby GPT, one layer)", 8, 256, 6, 6, 64, 0.2},
      {"B (GPT-2 at T 64, one layer)", 4, 64, 12, 12, 64, 0.0},
      {"GPT-2 at T 1024, one layer", 1, 1024, 12, 12, 64, 0.0},
      {"GQA: 8 query heads on 2", 8, 256, 8, 2, 64, 0.1},
  };
  Generator gen(1);
  for (const Case& c : cases) {
    nn::Dropout drop(c.p);
    drop.train(true);
    drop.context->seed = 7;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.HS));
    Tensor qkv = randn({c.B, c.T, (c.NH + 2 * c.KVH) * c.HS}, gen);
    qkv.requires_grad_();
    Tensor g = randn({c.B, c.T, c.NH * c.HS}, gen);
    std::vector<double> tf, tc;
    for (int r = 0; r < runs + 1; ++r) {
      for (int path = 0; path < 2; ++path) {
        qkv.zero_grad();
        auto s = std::chrono::steady_clock::now();
        Tensor y = path == 0 ? attention_qkv(qkv, c.NH, c.KVH, scale, 0, drop.stream())
                             : composed(qkv, c.NH, c.KVH, scale, drop);
        y.backward(g);
        const double t = ms_since(s);
        if (r > 0) (path == 0 ? tf : tc).push_back(t);  // the first round warms up
      }
    }
    std::sort(tf.begin(), tf.end());
    std::sort(tc.begin(), tc.end());
    const double f = tf[tf.size() / 2], m = tc[tc.size() / 2];
    std::printf("%-30s %4ld %5ld %4ld %4ld %4ld %5.2f %10.2f %10.2f %7.2fx\n", c.name,
                static_cast<long>(c.B), static_cast<long>(c.T), static_cast<long>(c.NH),
                static_cast<long>(c.KVH), static_cast<long>(c.HS), c.p, f, m, m / f);
  }
}
