#include "nn/module.h"

#include <cmath>
#include <set>

#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::nn {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  ATTEND_CHECK(is_floating(t.dtype()), "register_parameter: '", name, "' must be floating, got ",
               dtype_name(t.dtype()));
  for (const auto& [n, _] : params_)
    ATTEND_CHECK(n != name, "register_parameter: '", name, "' is already registered");
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

void Module::replace_parameter(const std::string& name, const Tensor& t) {
  for (auto& [n, p] : params_) {
    if (n == name) {
      p = t;
      return;
    }
  }
  throw Error(str("replace_parameter: no parameter named '", name, "'"));
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_)
    child->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors all;
  collect("", all);
  return all;
}

NamedTensors Module::named_parameters() const {
  NamedTensors unique;
  std::set<const TensorImpl*> seen;
  for (auto& [name, t] : state_dict())
    if (seen.insert(t.impl()).second) unique.emplace_back(name, t);
  return unique;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_trainable_parameters() const {
  NamedTensors out;
  for (auto& [name, t] : named_parameters())
    if (t.requires_grad()) out.emplace_back(name, t);
  return out;
}

std::vector<Tensor> Module::trainable_parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_trainable_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [_, t] : named_parameters()) n += t.numel();
  return n;
}

namespace {

// load_state_dict's checks: every missing, unexpected or mismatched entry, in one error.
void check_state(const NamedTensors& mine, const std::map<std::string, Tensor>& state) {
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> known;
  for (const auto& [name, t] : mine) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(name + " (expected " + shape_str(t.shape()) + ", got " +
                           shape_str(it->second.shape()) + ")");
    }
  }
  for (const auto& [name, _] : state)
    if (!known.count(name)) unexpected.push_back(name);
  // A tied parameter (one tensor, two names) must come as one tensor or two equal ones;
  // otherwise one of the two would be dropped silently.
  std::map<const TensorImpl*, std::string> first_name;
  for (const auto& [name, t] : mine) {
    auto [it, fresh] = first_name.emplace(t.impl(), name);
    if (fresh || !state.count(name) || !state.count(it->second)) continue;
    const Tensor &a = state.at(it->second), &b = state.at(name);
    if (a.impl() != b.impl() && a.shape() == b.shape() &&
        kernel::contiguous(a).to_vector<double>() != kernel::contiguous(b).to_vector<double>())
      mismatched.push_back(name + " (tied to " + it->second + ", but its values differ)");
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = "load_state_dict: the state does not match the model:";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg += std::string("\n  ") + what + ": ";
      for (size_t i = 0; i < v.size(); ++i) msg += (i ? ", " : "") + v[i];
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("wrong shape", mismatched);
    throw Error(msg);
  }
}

}  // namespace

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  NamedTensors mine = state_dict();
  check_state(mine, state);
  NoGradGuard no_grad;
  for (const auto& [name, t] : mine) kernel::copy_(t, state.at(name));
}

void Module::take_state_dict(std::map<std::string, Tensor>&& state, bool frozen_bf16) {
  NamedTensors mine = state_dict();
  check_state(mine, state);
  NoGradGuard no_grad;
  std::set<const TensorImpl*> done;  // a tied parameter is set once, under its first name
  for (const auto& [name, t] : mine) {
    if (!done.insert(t.impl()).second) {
      state.erase(name);
      continue;
    }
    Tensor src = std::move(state.at(name));
    state.erase(name);
    if (frozen_bf16 && !t.requires_grad() && t.dim() == 2 && t.dtype() == DType::F32)
      t.set_data(kernel::cast(src, DType::BF16));
    else if (src.dtype() == t.dtype() && src.is_contiguous() && !src.requires_grad() &&
             src.impl()->offset == 0 && src.numel() * dtype_size(src.dtype()) ==
                                            src.impl()->storage->nbytes)
      t.set_data(src);  // the buffer is the parameter's now
    else
      kernel::copy_(t, src);
    // The state's other names for this tensor (a tie) let it go too.
    for (auto it = state.begin(); it != state.end();)
      it = it->second.impl() == src.impl() ? state.erase(it) : std::next(it);
    src = Tensor();
    release_storage_cache();  // the parameter's old buffer and a copied source's
  }
}

void Module::train(bool on) {
  for (auto& [_, m] : named_modules()) m->training_ = on;
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

void Module::to(DType dtype) {
  for (auto& t : parameters())
    if (t.dtype() != dtype) t.set_data(kernel::cast(t, dtype));
}

std::string first_non_finite(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    const Tensor c = kernel::contiguous(t);
    bool finite = true;
    dispatch_float(c.dtype(), "first_non_finite",
                   [&]<typename T>() { finite = all_finite(c.data<T>(), c.numel()); });
    if (!finite) return name;
  }
  return "";
}

}  // namespace attend::nn
