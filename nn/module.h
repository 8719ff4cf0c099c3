// Module: a named tree of parameters and submodules, as torch.nn.Module.
//
// A module registers each parameter and child by name; names join with dots, so a GPT's
// named_parameters() yields GPT-2's own state_dict keys (transformer.h.0.attn.c_attn.weight).
// Everything that walks parameters (counts, optimizers, checkpoints, gradcheck) derives
// from this registry, never from a hand-kept list.
//
// Tied parameters: one tensor registered under two names (GPT's lm_head.weight is
// transformer.wte.weight). parameters(), named_parameters() and num_parameters() list it
// once, under its first name; state_dict() lists every name, as PyTorch does.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The name of the first tensor holding a NaN or an infinity, or "" if all are finite.
std::string first_non_finite(const NamedTensors& tensors);

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters, each once, in registration order (depth first).
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // The parameters that train (requires_grad): all of them unless some are frozen (LoRA's
  // base, nn/lora.h). Gradients, clipping, optimizers and MPI's sums walk these.
  NamedTensors named_trainable_parameters() const;
  std::vector<Tensor> trainable_parameters() const;
  // Every name, tied ones included.
  NamedTensors state_dict() const;
  // Copies values in by name. Every missing, unexpected or mismatched (shape) entry is
  // reported by name in one error; nothing is changed unless all match.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // The same checks, then takes the state's tensors instead of copying them: a contiguous
  // tensor of the parameter's dtype becomes the parameter's storage (no copy), another is
  // copied, and each is let go as soon as it is in (its buffer back to the system), so
  // loading a checkpoint never holds two copies of more than one tensor. With frozen_bf16,
  // every frozen matrix (requires_grad off, 2-D) is stored as bf16 straight from the state
  // (nn::store_frozen_as_bf16's conversion, the same bits). The caller must hold no other
  // reference to the state's tensors if their memory is to go.
  void take_state_dict(std::map<std::string, Tensor>&& state, bool frozen_bf16 = false);

  // Submodules, depth first, self first with name "".
  std::vector<std::pair<std::string, Module*>> named_modules();

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Converts every parameter to dtype in place (ties survive: the shared impl changes).
  void to(DType dtype);

 protected:
  // Registers t under name, marking it as requiring grad; returns it.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Points an existing parameter name at another tensor (tying).
  void replace_parameter(const std::string& name, const Tensor& t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out);

  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A list of modules named "0", "1", ... (torch.nn.ModuleList).
template <typename M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(m)));
  }
  M& operator[](size_t i) const { return *items_.at(i); }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace attend::nn
#pragma GCC visibility pop
