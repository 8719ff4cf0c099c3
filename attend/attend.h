// attend: the umbrella header. Include this and link attend_train (or the library of the
// layer you need) to get the whole public API.
#pragma once

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
