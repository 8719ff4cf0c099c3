// matmul backward: for C = A @ B,  dA = dC @ B^T,  dB = A^T @ dC, then summed over any
// broadcast batch dims (see Note [Broadcast gradients]). Transposes are stride views, so
// the backward products read the saved operands in place.
#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

using autograd::Needs;

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out = kernel::matmul(a, b);
  autograd::record(
      "matmul", {a, b}, out, [a = a.detach(), b = b.detach()](const Tensor& g, const Needs& n) {
        Tensor ga, gb;
        if (n[0]) ga = kernel::sum_to(kernel::matmul(g, kernel::transpose(b, -1, -2)), a.shape());
        if (n[1]) {
          if (b.dim() == 2 && a.dim() > 2) {
            // (..., M, K) @ (K, N): fold the batch into M, one (K, N) product, no batch sum.
            const int64_t K = a.size(-1), N = b.size(-1);
            Tensor a2 = kernel::reshape(a, {-1, K}), g2 = kernel::reshape(g, {-1, N});
            gb = kernel::matmul(kernel::transpose(a2, 0, 1), g2);
          } else {
            gb = kernel::sum_to(kernel::matmul(kernel::transpose(a, -1, -2), g), b.shape());
          }
        }
        return std::vector<Tensor>{ga, gb};
      });
  return out;
}

}  // namespace attend
