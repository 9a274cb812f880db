#pragma once
// kiln: everything. (CUDA translation units include kiln/graph/graph.hpp and kiln/backend/thrust/transform.hpp.)
#include "backend/cpu/run.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"
#include "eager/eager.hpp"
#include "data/batches.hpp"
#include "graph/graph.hpp"
#include "nn/layers.hpp"
#include "nn/optim.hpp"
#include "ops/ops.hpp"
