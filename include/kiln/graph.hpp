#pragma once
// Graph mode alone: expressions, kiln::run / run_into / fetch on the CPU, structural ops, kiln::grad, kiln::session
// and the graph-mode layers, without eager mode's operations (kiln::tensor is there as a feed and a result).
// Programs that use only graph mode include this instead of kiln/kiln.hpp; it costs less to compile.
#include "graph/grad.hpp"
#include "graph/graph.hpp"
#include "graph/run.hpp"
#include "graph/session.hpp"
#include "graph/structural.hpp"
#include "nn/graph_layers.hpp"
