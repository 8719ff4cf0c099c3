// The `attend` program's commands. Each app/cmd_X.cpp registers one subcommand: its flags
// beside the handler that reads them. The handler's exit code lands in `rc`; errors are
// thrown (attend::Error: the user's; anything else: ours) and mapped to exit codes by main.
#pragma once

#include <string>

#include "tensor/kernels/gemm.h"

namespace CLI {
class App;
}  // namespace CLI

namespace attend::infer {
struct SampleOptions;
}  // namespace attend::infer

namespace attend::cli {

void add_gradcheck(CLI::App& app, int& rc);
void add_tokenize(CLI::App& app, int& rc);
void add_prepare(CLI::App& app, int& rc);
void add_train(CLI::App& app, int& rc);
void add_sample(CLI::App& app, int& rc);
void add_chat(CLI::App& app, int& rc);
void add_eval(CLI::App& app, int& rc);
void add_plot(CLI::App& app, int& rc);
void add_summary(CLI::App& app, int& rc);
void add_attention(CLI::App& app, int& rc);
void add_import(CLI::App& app, int& rc);
void add_export(CLI::App& app, int& rc);
void add_heads(CLI::App& app, int& rc);
void add_diagram(CLI::App& app, int& rc);

// The precision a command's products use (Note [Precision is scoped] in
// tensor/kernels/gemm.h): `value` ("f32" or "bf16", else refused naming `what`), said once on
// stderr when it is bf16 (AVX512_BF16 or the emulation). Hold the scope for the command.
kernel::PrecisionScope use_precision(const std::string& value, const std::string& what);
void say_precision(kernel::GemmPrecision p);  // the line alone (train: the trainer holds the scope)
// The precision of sample and eval: --weights bf16 needs bf16 products (refused with
// --precision f32), else --precision if given, else the checkpoint's.
std::string weights_precision(const std::string& weights, const std::string& precision,
                              const std::string& checkpoint_precision);
// --weights on sample and eval: the weights' format while the command runs.
void add_weights_option(CLI::App* cmd, std::string& weights);

// sample's and chat's draw: --temperature, --top_k, --top_p, --seed into `o`.
void add_draw_options(CLI::App* cmd, infer::SampleOptions& o);

// "--max_iters,--max-iters" for a field named max_iters: both spellings accepted.
std::string flag_names(const std::string& name);

}  // namespace attend::cli
