#pragma once
// Function mode on its own: kiln::function, its run-time graphs and their passes (kiln/kiln.hpp includes it).
#include "function/function.hpp"
#include "nn/attention.hpp"
#include "nn/layers.hpp"
#include "nn/recurrent.hpp"
#include "nn/resize.hpp"
#include "nn/optim.hpp"
