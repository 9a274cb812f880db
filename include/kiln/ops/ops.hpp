#pragma once
// The whole elementwise vocabulary.
#include "arithmetic.hpp"
#include "cast.hpp"
#include "compare.hpp"
#include "math.hpp"
#include "binary_math.hpp"
#include "activations.hpp"
