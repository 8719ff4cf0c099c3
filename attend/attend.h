// attend: the umbrella header, the public API in one include: tensors and random numbers,
// autograd (ops, custom ops, gradcheck), the modules, GPT and Llama, tokenizers and
// datasets, the training config, step, loop and optimizers, checkpoints, loading and
// sampling, weights in and out (GPT-2, Hugging Face Llama, llama2.c), and the views
// (attention maps, heads, diagrams, plots). Installed, #include <attend/attend.h> and link
// attend::attend (docs/library.md); in the tree, link attend_train (and attend_viz for the
// views). Each room's headers can also be included alone. tests/app/test_readme.cpp
// compiles README's example against this header alone.
#pragma once

#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/half.h"
#include "tensor/quant.h"
#include "tensor/random.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"

#include "nn/attention.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/lora.h"
#include "nn/module.h"
#include "nn/seq2seq.h"
#include "nn/summary.h"

#include "data/dataset.h"
#include "data/hf_tokenizer.h"
#include "data/instructions.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/version.h"
#include "convert/format.h"
#include "convert/gguf_io.h"
#include "convert/gpt2_io.h"
#include "convert/hf_llama_io.h"
#include "convert/llama2c_io.h"
#include "infer/decoding.h"
#include "infer/sample.h"

#include "train/config.h"
#include "train/model_io.h"
#include "train/optim.h"
#include "train/step.h"
#include "train/trainer.h"

#include "viz/diagram.h"
#include "viz/explorer.h"
#include "viz/head_ablation.h"
#include "viz/head_sum.h"
#include "viz/heads_view.h"
#include "viz/plot.h"
#include "viz/summary_text.h"
