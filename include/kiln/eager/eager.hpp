#pragma once
// Eager mode: kiln::tensor, its factories, elementwise ops, reductions and printing.
#include "elementwise.hpp"
#include "factories.hpp"
#include "indexing.hpp"
#include "linalg.hpp"
#include "npy.hpp"
#include "print.hpp"
#include "reduce.hpp"
#include "shape_ops.hpp"
#include "sorting.hpp"
#include "tape.hpp"
#include "tensor.hpp"
#include "xtensor.hpp"
