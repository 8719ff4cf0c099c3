// attend: the umbrella header. Include this and link attend_train to get the library's
// public API: tensors and random numbers, autograd and gradcheck, the modules and GPT,
// tokenizers and datasets, the training config, step and loop, checkpoints, loading and
// sampling. (The views are attend_viz: viz/explorer.h, viz/plot.h, viz/summary_text.h.)
// tests/app/test_readme.cpp compiles README's example against this header alone.
#pragma once

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "nn/module.h"
#include "nn/summary.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
#include "io/checkpoint.h"
#include "train/config.h"
#include "train/model_io.h"
#include "train/sample.h"
#include "train/step.h"
#include "train/trainer.h"
