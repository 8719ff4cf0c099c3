// The backward engine: reverse topological order over the nodes reachable from the root,
// gradients summed per node before it runs, and accumulated (+=) into leaves' grad().
#include <algorithm>
#include <unordered_map>

#include "autograd/node.h"
#include "tensor/kernels.h"

namespace attend::autograd {

Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack;
  auto take = [&stack](Node& n) {
    for (Edge& e : n.next)
      if (e.node) stack.push_back(std::move(e.node));
    n.next.clear();
    n.backward = nullptr;  // its captured tensors may own nodes too; those are stacked first
  };
  take(*this);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) take(*n);  // the last owner: empty it, then it dies shallow
  }
}

namespace {
thread_local bool grad_enabled = true;
}

bool is_grad_enabled() { return grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = prev_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& out, BackwardFn fn) {
  record(name, inputs, out, std::move(fn), -1, nullptr);
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& out, BackwardFn fn,
            int accumulate_input, AccumulateFn accumulate) {
  if (!needs_grad(inputs)) return;
  for (const Tensor& t : inputs) {
    if (t.defined() && out.is_same(t)) {
      out = make_view(out, out.shape(), out.strides(), out.offset());
      break;
    }
  }
  auto node = std::make_shared<Node>();
  node->name = name;
  for (const Tensor& t : inputs) {
    Edge e;
    const bool need = t.defined() && t.requires_grad();
    if (need) {
      if (t.is_leaf()) {
        e.leaf = t.impl_ptr();
      } else {
        e.node = t.grad_fn();
      }
    }
    node->next.push_back(std::move(e));
    node->needs.push_back(need);
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::F32);
  }
  node->backward = std::move(fn);
  if (accumulate && accumulate_input >= 0 &&
      static_cast<size_t>(accumulate_input) < node->next.size()) {
    node->accumulate_input = accumulate_input;
    node->accumulate = std::move(accumulate);
  }
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::move(node);
}

namespace {

// The leaf's first gradient: the tensor itself when nothing else can see it (its only
// handle is `g`, it is the only tensor on its storage, and it covers that storage exactly,
// contiguously), else a copy. A backward's fresh result (a matmul's dW, an embedding's
// table) is taken as it is: a training step no longer copies every parameter's gradient
// (measured: `kernel::clone` was 3.2% of a GPT-2 124M step). A gradient that is also an
// op's input or output, or a view, is copied as before, so later in-place accumulation
// can never reach another tensor.
void accumulate_leaf(TensorImpl* leaf, Tensor& g) {
  if (!leaf->grad) {
    const std::shared_ptr<TensorImpl>& impl = g.impl_ptr();
    const bool sole =
        impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->grad_fn && !impl->grad &&
        impl->offset == 0 && g.is_contiguous() &&
        impl->storage->nbytes == static_cast<size_t>(g.numel()) * dtype_size(g.dtype());
    if (sole) {
      leaf->grad = impl;
      g = Tensor();  // the leaf's now: the engine drops its handle
    } else {
      leaf->grad = kernel::clone(g).impl_ptr();
    }
  } else {
    kernel::add_(Tensor(leaf->grad), g);
  }
}

// The input whose gradient node n adds into its leaf's existing one, or -1: n has
// Node::accumulate, that input needs a gradient, and is a leaf that already has one of the
// input's shape and dtype, contiguous (else backward builds it and accumulate_leaf adds it).
int accumulated_input(const Node& n) {
  if (!n.accumulate || n.accumulate_input < 0) return -1;
  const auto i = static_cast<size_t>(n.accumulate_input);
  const Edge& e = n.next[i];
  if (!n.needs[i] || !e.leaf || !e.leaf->grad) return -1;
  const Tensor g(e.leaf->grad);
  if (g.shape() != n.input_shapes[i] || g.dtype() != n.input_dtypes[i] || !g.is_contiguous())
    return -1;
  return n.accumulate_input;
}

}  // namespace

}  // namespace attend::autograd

namespace attend {

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  using namespace autograd;
  ATTEND_CHECK(requires_grad(),
               "backward: the tensor does not require grad (was it computed under no-grad, or "
               "from inputs none of which require grad?)");
  Tensor g = grad;
  if (!g.defined()) {
    ATTEND_CHECK(numel() == 1,
                 "backward: a gradient can be created implicitly only for a one-element "
                 "output, got shape ",
                 shape_str(shape()), "; pass grad explicitly");
    g = ones(shape(), dtype());
  }
  ATTEND_CHECK(g.shape() == shape() && g.dtype() == dtype(), "backward: expected grad of shape ",
               shape_str(shape()), " and dtype ", dtype_name(dtype()), ", got ",
               shape_str(g.shape()), " ", dtype_name(g.dtype()));
  NoGradGuard no_grad;
  if (is_leaf()) {
    accumulate_leaf(impl(), g);
    return;
  }

  // Count, for each reachable node, the edges that lead into it.
  Node* root = grad_fn().get();
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root};
  deps[root] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      auto [it, fresh] = deps.try_emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, Tensor> pending{{root, g}};
  std::vector<Node*> ready{root};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor gn = std::move(pending[n]);
    pending.erase(n);
    ATTEND_CHECK(!n->released, "backward: the graph through '", n->name,
                 "' was already freed by an earlier backward; pass retain_graph=true to the "
                 "first backward to run backward twice");
    // An input whose gradient the node adds into its leaf's in place (Node::accumulate).
    const int into = gn.defined() ? accumulated_input(*n) : -1;
    std::vector<Tensor> grads;
    if (gn.defined()) {
      if (into < 0) {
        grads = n->backward(gn, n->needs);
      } else {
        Tensor leaf_grad(n->next[static_cast<size_t>(into)].leaf->grad);
        n->accumulate(gn, leaf_grad);
        Needs rest = n->needs;
        rest[static_cast<size_t>(into)] = false;
        if (std::find(rest.begin(), rest.end(), true) != rest.end()) grads = n->backward(gn, rest);
      }
    }
    grads.resize(n->next.size());
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      Tensor& gi = grads[i];
      if (n->needs[i] && static_cast<int>(i) != into && gi.defined()) {
        ATTEND_CHECK(gi.shape() == n->input_shapes[i] && gi.dtype() == n->input_dtypes[i],
                     "backward of '", n->name, "': gradient ", i, " has shape ",
                     shape_str(gi.shape()), " ", dtype_name(gi.dtype()), ", expected ",
                     shape_str(n->input_shapes[i]), " ", dtype_name(n->input_dtypes[i]),
                     " (a bug in the op's backward)");
        if (e.leaf) {
          accumulate_leaf(e.leaf.get(), gi);  // may take gi (then gi is empty)
        } else if (e.node) {
          Tensor& slot = pending[e.node.get()];
          slot = slot.defined() ? kernel::binary(kernel::Binary::Add, slot, gi) : gi;
        }
      }
      if (e.node && --deps[e.node.get()] == 0) ready.push_back(e.node.get());
    }
    if (!retain_graph) {
      n->backward = nullptr;
      n->accumulate = nullptr;
      n->released = true;
    }
  }
}

}  // namespace attend
