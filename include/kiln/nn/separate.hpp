#pragma once
// The losses, the dense layer and the optimizers' steps, compiled once per program with KILN_SEPARATE_KERNELS (as
// kiln/eager/separate.hpp does for eager ops; kiln/implementation.hpp defines them).
#include <vector>

#include "../eager/separate.hpp"
#include "layers.hpp"
#include "optim.hpp"

#define KILN_DETAIL_NN(P)                                                                                          \
    namespace kiln::nn {                                                                                           \
    P tensor softmax<0>(const tensor&, int);                                                                       \
    P tensor log_softmax<0>(const tensor&, int);                                                                   \
    P tensor mse<0>(const tensor&, const tensor&);                                                                 \
    P tensor cross_entropy<0>(const tensor&, const tensor&);                                                       \
    P tensor l1_loss<0>(const tensor&, const tensor&);                                                             \
    P tensor huber_loss<0>(const tensor&, const tensor&, double);                                                  \
    P tensor smooth_l1_loss<0>(const tensor&, const tensor&, double);                                              \
    P tensor binary_cross_entropy<0>(const tensor&, const tensor&);                                                \
    P tensor binary_cross_entropy_with_logits<0>(const tensor&, const tensor&, const tensor&);                     \
    P class basic_dense<0>;                                                                                        \
    }                                                                                                              \
    namespace kiln::optim {                                                                                        \
    P void sgd::step_impl<0>(const std::vector<tensor>&);                                                               \
    P void adam::step_impl<0>(const std::vector<tensor>&);                                                              \
    }

#if defined(KILN_SEPARATE_KERNELS) && !defined(KILN_IMPLEMENTATION)
KILN_DETAIL_NN(extern template)
#endif
