// attend: the umbrella header, the public API in one include: tensors and random numbers,
// autograd (ops, custom ops, gradcheck), the modules, GPT and Llama, tokenizers and
// datasets, the training config, step, loop and optimizers, checkpoints, loading and
// sampling, and the attention views' data. Installed, #include <attend/attend.h> and link
// attend::attend (docs/library.md); in the tree, link attend_train (and attend_viz for the
// views). Each room's headers can also be included alone. tests/app/test_readme.cpp
// compiles README's example against this header alone.
#pragma once

#include "tensor/dtype.h"
#include "tensor/error.h"
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
#include "nn/module.h"
#include "nn/summary.h"

#include "data/dataset.h"
#include "data/tokenizer.h"

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/version.h"

#include "train/config.h"
#include "train/model_io.h"
#include "train/optim.h"
#include "train/sample.h"
#include "train/step.h"
#include "train/trainer.h"

#include "viz/explorer.h"
#include "viz/head_sum.h"
