#pragma once
// Graph mode without a backend: nodes, folding, planning and evaluation (usable from CUDA code).
#include "../expr/build.hpp"
#include "../expr/evaluate.hpp"
#include "../expr/feed.hpp"
#include "../expr/shape_inference.hpp"
#include "../expr/unique_nodes.hpp"
#include "print.hpp"
