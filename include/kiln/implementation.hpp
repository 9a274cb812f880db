#pragma once
// The translation unit that compiles eager mode's kernels for a program built with KILN_SEPARATE_KERNELS
// (kiln/eager/separate.hpp, kiln/nn/separate.hpp): `#define KILN_IMPLEMENTATION` before `#include <kiln/kiln.hpp>`
// in exactly one unit, or in KILN_IMPLEMENTATION_PARTS units (1, 2 or 4) that each define a different
// KILN_IMPLEMENTATION_PART. (kiln/kiln.hpp includes this file last.)
#include "eager/separate.hpp"
#include "function/separate.hpp"
#include "io.hpp"
#include "nn/separate.hpp"
#include "registry.hpp"

#ifndef KILN_IMPLEMENTATION_PARTS
#define KILN_IMPLEMENTATION_PARTS 1
#endif
#ifndef KILN_IMPLEMENTATION_PART
#define KILN_IMPLEMENTATION_PART 0
#endif
#if KILN_IMPLEMENTATION_PARTS != 1 && KILN_IMPLEMENTATION_PARTS != 2 && KILN_IMPLEMENTATION_PARTS != 4
#error "kiln: KILN_IMPLEMENTATION_PARTS must be 1, 2 or 4 (the eager kernels come in four groups)"
#endif
#if KILN_IMPLEMENTATION_PART < 0 || KILN_IMPLEMENTATION_PART >= KILN_IMPLEMENTATION_PARTS
#error "kiln: KILN_IMPLEMENTATION_PART must be at least 0 and less than KILN_IMPLEMENTATION_PARTS"
#endif

namespace kiln::detail {
#if 0 % KILN_IMPLEMENTATION_PARTS == KILN_IMPLEMENTATION_PART
KILN_SEPARATE_GROUP_0(KILN_DETAIL_DEFINE_U, KILN_DETAIL_DEFINE_B, KILN_DETAIL_DEFINE_T, KILN_DETAIL_DEFINE_I)
#define KILN_DETAIL_DEFINE_RUNTIME
#endif
#if 1 % KILN_IMPLEMENTATION_PARTS == KILN_IMPLEMENTATION_PART
KILN_SEPARATE_GROUP_1(KILN_DETAIL_DEFINE_U, KILN_DETAIL_DEFINE_B, KILN_DETAIL_DEFINE_T, KILN_DETAIL_DEFINE_I)
#define KILN_DETAIL_DEFINE_STRUCTURAL
#endif
#if 2 % KILN_IMPLEMENTATION_PARTS == KILN_IMPLEMENTATION_PART
KILN_SEPARATE_GROUP_2(KILN_DETAIL_DEFINE_U, KILN_DETAIL_DEFINE_B, KILN_DETAIL_DEFINE_T, KILN_DETAIL_DEFINE_I)
#endif
#if 3 % KILN_IMPLEMENTATION_PARTS == KILN_IMPLEMENTATION_PART
KILN_SEPARATE_GROUP_3(KILN_DETAIL_DEFINE_U, KILN_DETAIL_DEFINE_B, KILN_DETAIL_DEFINE_T, KILN_DETAIL_DEFINE_I)
#endif
}  // namespace kiln::detail

#ifdef KILN_DETAIL_DEFINE_STRUCTURAL
KILN_DETAIL_STRUCTURAL(template)
KILN_DETAIL_NN(template)
#undef KILN_DETAIL_DEFINE_STRUCTURAL
#endif

// Function mode's machinery, the registry's table and kiln/io.hpp's readers and writers (with the first group: the
// second has the reductions, products and layers).
#ifdef KILN_DETAIL_DEFINE_RUNTIME
KILN_DETAIL_FUNCTION(template)
KILN_DETAIL_REGISTRY(template)
KILN_DETAIL_IO(template)
#undef KILN_DETAIL_DEFINE_RUNTIME
#endif
