// A translation unit with a 50-node graph-mode expression, planned and run: the compile-time benchmark.
#include <kiln/graph/run.hpp>  // graph mode only: eager mode's headers cost seconds more

#include <cstdio>
#include <vector>

int main() {
    const auto a = kiln::input<"a", float>{};
    const auto b = kiln::input<"b", float>{};
    const auto c = kiln::input<"c", float>{};
    const auto d = kiln::input<"d", float>{};
    const auto v4 = (d + b);
    const auto v5 = (v4 * c);
    const auto v6 = kiln::sigmoid(v5);
    const auto v7 = kiln::maximum(v6, v4);
    const auto v8 = kiln::minimum(v7, v4);
    const auto v9 = kiln::relu(v8);
    const auto v10 = (v9 * v7);
    const auto v11 = (v10 - c);
    const auto v12 = kiln::abs(v11);
    const auto v13 = kiln::minimum(v12, v10);
    const auto v14 = (v13 + b);
    const auto v15 = kiln::tanh(v14);
    const auto v16 = (v15 - v7);
    const auto v17 = kiln::maximum(v16, v10);
    const auto v18 = kiln::square(v17);
    const auto v19 = (v18 + v16);
    const auto v20 = (v19 * a);
    const auto v21 = kiln::sigmoid(v20);
    const auto v22 = kiln::maximum(v21, v4);
    const auto v23 = kiln::minimum(v22, v6);
    const auto v24 = kiln::relu(v23);
    const auto v25 = (v24 * v10);
    const auto v26 = (v25 - v12);
    const auto v27 = kiln::abs(v26);
    const auto v28 = kiln::minimum(v27, v16);
    const auto v29 = (v28 + v18);
    const auto v30 = kiln::tanh(v29);
    const auto v31 = (v30 - v22);
    const auto v32 = kiln::maximum(v31, v24);
    const auto v33 = kiln::square(v32);
    const auto v34 = (v33 + v28);
    const auto v35 = (v34 * v30);
    const auto v36 = kiln::sigmoid(v35);
    const auto v37 = kiln::maximum(v36, v34);
    const auto v38 = kiln::minimum(v37, v36);
    const auto v39 = kiln::relu(v38);
    const auto v40 = (v39 * b);
    const auto v41 = (v40 - c);
    const auto v42 = kiln::abs(v41);
    const auto v43 = kiln::minimum(v42, v4);
    const auto v44 = (v43 + v5);
    const auto v45 = kiln::tanh(v44);
    const auto v46 = (v45 - v7);
    const auto v47 = kiln::maximum(v46, v8);
    const auto v48 = kiln::square(v47);
    const auto v49 = (v48 + v10);
    const auto v50 = (v49 * v11);
    const auto v51 = kiln::sigmoid(v50);
    const auto v52 = kiln::maximum(v51, v13);
    const auto v53 = kiln::minimum(v52, v14);
    static_assert(kiln::detail::unique_nodes_t<std::remove_const_t<decltype(v53)>>::size >= 50);
    std::vector<float> x(1000, 0.5f);
    const auto r = kiln::run(v53, a = x, b = x, c = x, d = x);
    std::printf("%g\n", static_cast<double>(r(0)));
}
