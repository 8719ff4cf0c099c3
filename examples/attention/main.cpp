// Loads a checkpoint written by `attend train` and prints one head's attention weights
// for a prompt: query rows, key columns, the future masked, every row summing to 1.
//   attention RUN_FOLDER_OR_CHECKPOINT [PROMPT] [LAYER] [HEAD]
#include <attend/attend.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace attend;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN_FOLDER_OR_CHECKPOINT [PROMPT] [LAYER] [HEAD]\n", argv[0]);
    return 2;
  }
  try {
    const train::LoadedModel m = train::load_model(std::string(argv[1]));
    const std::string prompt = argc > 2 ? argv[2] : "To be or not";
    const viz::AttentionMap a = viz::compute_attention(*m.model, *m.tokenizer, prompt);
    const int64_t layer = argc > 3 ? std::atoll(argv[3]) : 0, head = argc > 4 ? std::atoll(argv[4]) : 0;
    if (layer < 0 || layer >= a.n_layer || head < 0 || head >= a.n_head) {
      std::fprintf(stderr, "layer %lld head %lld: the model has %lld layers of %lld heads\n",
                   static_cast<long long>(layer), static_cast<long long>(head),
                   static_cast<long long>(a.n_layer), static_cast<long long>(a.n_head));
      return 2;
    }
    std::printf("%s\nlayer %lld, head %lld: rows are queries, columns keys\n", a.model.c_str(),
                static_cast<long long>(layer), static_cast<long long>(head));
    const auto& w = a.weights[static_cast<size_t>(layer)][static_cast<size_t>(head)];
    const int64_t T = a.T();
    bool ok = true;
    for (int64_t i = 0; i < T; ++i) {
      double sum = 0;
      std::printf("%8s", a.tokens[static_cast<size_t>(i)].c_str());
      for (int64_t j = 0; j < T; ++j) {
        const double v = w[static_cast<size_t>(i * T + j)];
        sum += v;
        if (a.masked(i, j) && v != 0) ok = false;  // the future gets exactly nothing
        std::printf(" %5.3f", v);
      }
      std::printf("   sum %.6f\n", sum);
      if (std::fabs(sum - 1) > 1e-5) ok = false;
    }
    std::printf("%s\n", ok ? "every row sums to 1; the future is masked" : "FAILED: a row or the mask is wrong");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
