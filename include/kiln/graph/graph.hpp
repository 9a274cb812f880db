#pragma once
// Graph mode without a backend: nodes, folding, planning and evaluation (usable from CUDA code).
#include "build.hpp"
#include "evaluate.hpp"
#include "feed.hpp"
#include "print.hpp"
#include "shape_inference.hpp"
#include "unique_nodes.hpp"
