// A small MLP fits y = sin(3x) + noise on [-1, 1], written against attend's public API
// only: a Module of our own, SGD with momentum, a hand-written training loop.
#include <attend/attend.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

using namespace attend;

// Two hidden layers of tanh units.
class Mlp : public nn::Module {
 public:
  Mlp(int64_t hidden, Generator& gen) {
    l1 = register_module("l1", std::make_shared<nn::Linear>(1, hidden));
    l2 = register_module("l2", std::make_shared<nn::Linear>(hidden, hidden));
    l3 = register_module("l3", std::make_shared<nn::Linear>(hidden, 1));
    // Linear starts at zero; a scaled normal init as in PyTorch's default spirit.
    for (auto* l : {l1.get(), l2.get(), l3.get()})
      normal_(l->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(l->weight.size(1))), gen);
  }
  Tensor forward(const Tensor& x) const {
    return l3->forward(tanh(l2->forward(tanh(l1->forward(x)))));
  }
  std::shared_ptr<nn::Linear> l1, l2, l3;
};

int main() {
  Generator gen(1);
  const int64_t n = 256;
  const Tensor x = sub(mul(rand({n, 1}, gen), 2.0), 1.0);  // U[-1, 1)
  std::vector<double> target;
  for (float v : x.to_vector<float>()) target.push_back(std::sin(3.0 * v));
  const Tensor y = add(tensor(target, {n, 1}), mul(randn({n, 1}, gen), 0.05));
  Mlp model(32, gen);
  train::SGD opt(model.named_parameters(), /*momentum=*/0.9, /*weight_decay=*/0.0);
  double first = 0, last = 0;
  for (int step = 0; step <= 500; ++step) {
    model.zero_grad();
    const Tensor err = sub(model.forward(x), y);
    const Tensor loss = mean(mul(err, err));
    loss.backward();
    opt.step(0.05);
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 100 == 0) std::printf("step %3d  mse %.5f\n", step, loss.item());
  }
  std::printf("mse %.5f -> %.5f (%lld parameters)\n", first, last,
              static_cast<long long>(model.num_parameters()));
  return last < first / 10 ? 0 : 1;
}
