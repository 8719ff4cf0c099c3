// The autograd graph. See autograd/README.md for the contract every op follows.
//
// Define-by-run: a differentiable op computes its result with raw kernels and, when grad
// mode is on and any input requires grad, records a Node on the result. The node keeps
// one edge per input (the input's own node, or the leaf tensor itself) and a closure, the
// op's backward, that maps the gradient of the result to the gradients of the inputs.
// Tensor::backward walks the nodes in reverse topological order (engine.cpp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::autograd {

struct Node;

struct Edge {
  std::shared_ptr<Node> node;        // a non-leaf input: its grad flows into this node
  std::shared_ptr<TensorImpl> leaf;  // a leaf input: its grad accumulates here
  bool defined() const { return node || leaf; }
};

using Needs = std::vector<bool>;  // needs[i]: input i requires a gradient
// (grad of the output, needs) -> one gradient per input; an undefined Tensor means zero.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor&, const Needs&)>;
// (grad of the output, a leaf's gradient so far) -> adds one input's gradient into the
// second argument, in place.
using AccumulateFn = std::function<void(const Tensor&, Tensor&)>;

struct Node {
  const char* name = "";
  std::vector<Edge> next;           // one per input
  std::vector<Shape> input_shapes;  // to check each gradient's shape
  std::vector<DType> input_dtypes;
  Needs needs;
  BackwardFn backward;  // released (emptied) after use unless retain_graph
  // Optional, for an op whose gradient for one input is sparse (an embedding's table):
  // when input `accumulate_input` is a leaf that already has a gradient (a table tied to
  // the LM head), the engine calls `accumulate` to add into it in place and asks backward
  // for the other inputs only (needs[accumulate_input] false), so the dense gradient is
  // never built beside the one the leaf holds. Released with backward.
  int accumulate_input = -1;
  AccumulateFn accumulate;
  bool released = false;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Iterative: a graph a million ops deep is freed without a million nested destructors
  // (the default destructor recursed through `next` and overflowed the stack).
  ~Node();
};

// Grad mode is per thread; NoGradGuard turns recording off in a scope (evaluation,
// sampling, optimizer updates).
bool is_grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when an op on these inputs would record a node.
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `fn` as the backward of `out` = name(inputs), if needs_grad(inputs). `out` must
// be a fresh handle (record makes it one if a kernel returned an input unchanged).
// Whatever fn captures stays alive until the node is released: capture what backward
// needs and no more, and capture the output only as out.detach() (else it owns itself).
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& out, BackwardFn fn);
// The same, with Node::accumulate for input `accumulate_input`: fn must return that
// input's gradient when needs says so, and may skip it when needs says not.
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& out, BackwardFn fn,
            int accumulate_input, AccumulateFn accumulate);

}  // namespace attend::autograd

namespace attend {
using autograd::NoGradGuard;
}
#pragma GCC visibility pop
