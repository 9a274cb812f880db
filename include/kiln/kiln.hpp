#pragma once
// kiln: everything. (CUDA translation units include kiln/graph/graph.hpp and kiln/backend/thrust/transform.hpp.)
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"
#include "eager/eager.hpp"
#include "function/function.hpp"
#include "function/from_graph.hpp"
#include "data/batches.hpp"
#include "graph/graph.hpp"
#include "graph/grad.hpp"
#include "graph/run.hpp"
#include "graph/session.hpp"
#include "graph/structural.hpp"
#include "nn/graph_layers.hpp"
#include "nn/attention.hpp"
#include "nn/layers.hpp"
#include "nn/recurrent.hpp"
#include "nn/resize.hpp"
#include "nn/optim.hpp"
#include "ops/ops.hpp"
#include "registry.hpp"
#include "nn/separate.hpp"

// The one translation unit that compiles eager mode's kernels for a KILN_SEPARATE_KERNELS program.
#ifdef KILN_IMPLEMENTATION
#include "implementation.hpp"
#endif
