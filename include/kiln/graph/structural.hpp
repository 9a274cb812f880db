#pragma once
// Structural ops of graph mode: reductions (sum, mean, prod, max, min over axes), matmul, scans (cumsum, cumprod),
// transpose, reshape and broadcast_to, and the ops that gradients need (broadcast_like, sum_to, expand, reshape_as,
// count). The reductions, matmul and the scans are the mode-neutral ops of ops/ (ops/structural.hpp), made nodes
// by ops::with_attrs (structural/common.hpp); the views are graph mode's own for now.
//
// They are not elementwise, so the planner (graph/plan.hpp) cuts fusion groups at them: a structural op's result
// is materialized once into workspace, or, for a view (transpose, reshape of contiguous data, expand,
// broadcast_to), described by new strides over its operand without a copy.
//
// A structural op states, besides a name and a gradient rule:
//   structural                 the marker;
//   static_shape<S...>         its rule on static shapes (a static_assert names both shapes when they cannot fit);
//   shape(dims...)             its rule on run-time shapes (throws kiln::shape_error naming the op and the shapes);
//   compute<Device, T>(out, shape, in...) writing a contiguous result with the device's kernels
//                              (backend/device.hpp), and/or
//   try_view<T>(view, in...)   describing the result as a view of its operand (false when it cannot).
#include "structural/common.hpp"
#include "structural/reduce.hpp"
#include "structural/views.hpp"
#include "structural/matmul.hpp"
#include "structural/scan.hpp"
#include "structural/layout.hpp"
#include "structural/fns.hpp"
