// README's "A taste of the C++ API", compiled and run as written (only the umbrella
// header included), so the example and the header cannot drift apart; a second test
// checks that every line of the example below is in README.md.
#include <fstream>
#include <iostream>
#include <sstream>

#include "attend/attend.h"
#include "test_util.h"

TEST_CASE("the README's API example compiles and runs with only the umbrella header") {
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());  // keep what the example prints
  // ---- begin README example (keep in step with README.md) ----
  using namespace attend;

  Generator gen(42);                               // explicit, counter-based (Philox)
  Tensor x = randn({4, 3}, gen);                   // (4, 3) f32
  Tensor w = randn({5, 3}, gen).requires_grad_();  // Linear weight, (out, in)
  Tensor b = zeros({5}).requires_grad_();
  Tensor y = matmul(x, transpose(w, 0, 1)) + b;  // (4, 5); w^T is a view, no copy
  Tensor loss = cross_entropy(y, tensor({0, 4, 1, 2}, {4}, DType::I64));
  loss.backward();                // w.grad(), b.grad() now hold dL/dw, dL/db
  std::cout << w.grad() << "\n";  // shape, dtype and values

  nn::GPT model(nn::gpt_preset("cpu-char"), /*seed=*/1);
  for (auto& [name, p] : model.named_parameters())
    std::cout << name << " " << shape_str(p.shape()) << "\n";
  // ---- end README example ----
  std::cout.rdbuf(old);
  CHECK(w.grad().shape() == Shape{5, 3});
  CHECK(b.grad().shape() == Shape{5});
  CHECK(out.str().find("transformer.h.0.attn.c_attn.weight (384,128)") != std::string::npos);
}

TEST_CASE("every line of the README's API example is the one compiled above") {
  std::ifstream self(__FILE__), readme(ATTEND_SOURCE_DIR "/README.md");
  REQUIRE(self.good());
  REQUIRE(readme.good());
  // Compared with runs of spaces collapsed, so that formatting may differ.
  auto squeeze = [](const std::string& t) {
    std::string o;
    for (char ch : t)
      if (!(ch == ' ' && !o.empty() && o.back() == ' ')) o += ch;
    return o;
  };
  const std::string doc = squeeze(std::string((std::istreambuf_iterator<char>(readme)), {}));
  std::string line;
  bool inside = false;
  int lines = 0;
  while (std::getline(self, line)) {
    if (line.find("---- end README example") != std::string::npos) break;
    if (inside && !line.empty()) {
      const std::string code = squeeze(line.substr(line.find_first_not_of(' ')));
      CAPTURE(code);
      CHECK(doc.find(code) != std::string::npos);
      ++lines;
    }
    if (line.find("---- begin README example") != std::string::npos) inside = true;
  }
  CHECK(lines >= 10);  // the block was found and read
}
