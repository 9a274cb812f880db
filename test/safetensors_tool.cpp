// The C++ side of the safetensors interoperability test (test/safetensors_interop.py, run against Python's
// `safetensors` package):
//   safetensors_tool write PATH   writes the tensors listed below
//   safetensors_tool dump PATH    loads PATH and prints each tensor: name, dtype, shape and values (%.17g), and the
//                                 metadata, one item per line, in name order
#include <kiln/eager/eager.hpp>
#include <kiln/io/safetensors.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: safetensors_tool write|dump PATH\n");
        return 2;
    }
    const std::string mode = argv[1], path = argv[2];
    try {
        if (mode == "write") {
            // The values test/safetensors_interop.py expects (written out there by hand).
            const kiln::tensor m = kiln::from_values<double>({1.5, -2.25, 1e300, -0.0, 5e-324, 3.0}, {2, 3});
            kiln::save_safetensors(path, {
                {"weights/f64", m},
                {"weights/f32_t", m.to(kiln::float32).slice(1, 0, 2).transpose(0, 1)},  // a (2, 2) view: [[1.5, -0], [-2.25, 0]]
                {"counts/i32", kiln::from_values<std::int32_t>({-2147483647 - 1, 0, 7}, {3})},
                {"counts/i64", kiln::from_values<std::int64_t>({9007199254740993LL, -1}, {1, 2})},
                {"mask", kiln::from_values<bool>({true, false, false, true}, {2, 2})},
                {"empty", kiln::zeros({3, 0}, kiln::float32)},
                {"scalar", kiln::tensor(std::int64_t{42})},
            }, {{"written_by", "kiln"}, {"caf\xc3\xa9", "cr\xc3\xa8me"}});
            return 0;
        }
        if (mode == "dump") {
            const kiln::tensor_file f = kiln::load_safetensors(path);
            for (const auto& [k, v] : f.metadata) std::printf("meta %s=%s\n", k.c_str(), v.c_str());
            for (const auto& [name, t] : f.tensors) {
                std::printf("tensor %s %s (", name.c_str(), std::string(kiln::name(t.dtype())).c_str());
                for (int i = 0; i < t.dim(); ++i) std::printf("%s%td", i ? "," : "", t.shape()[i]);
                std::printf(")");
                const kiln::tensor c = t.contiguous();
                for (std::ptrdiff_t i = 0; i < c.numel(); ++i) {
                    switch (c.dtype()) {
                        case kiln::dtype::boolean: std::printf(" %d", c.data<bool>()[i] ? 1 : 0); break;
                        case kiln::dtype::int32: std::printf(" %d", c.data<std::int32_t>()[i]); break;
                        case kiln::dtype::int64: std::printf(" %lld", static_cast<long long>(c.data<std::int64_t>()[i])); break;
                        case kiln::dtype::float32: std::printf(" %.17g", static_cast<double>(c.data<float>()[i])); break;
                        case kiln::dtype::float64: std::printf(" %.17g", c.data<double>()[i]); break;
                    }
                }
                std::printf("\n");
            }
            return 0;
        }
    } catch (const kiln::error& e) {
        std::fprintf(stderr, "safetensors_tool: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "usage: safetensors_tool write|dump PATH\n");
    return 2;
}
